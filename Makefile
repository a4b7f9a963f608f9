.PHONY: quickstart test demo

quickstart:  ## install, then run GuideLLM's example on the simulated engine
	scripts/quickstart

test:  ## install everything the tests need, then lint, type-check and run every test
	scripts/test

demo:  ## a local control plane with fake GPU nodes, the chart and an example benchmark
	devtools/cluster/demo
