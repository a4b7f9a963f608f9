"""The certificates and keys one local control plane needs, made fresh for each run.

ECDSA P-256 keys throughout: generating them takes milliseconds, where RSA keys would add seconds to every
start-up, and every Kubernetes component accepts them (service-account tokens are then signed with ES256).
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for any test session or demo, short enough that a leaked key from a test run is worthless.
_VALIDITY = datetime.timedelta(days=7)
# Clocks of the processes involved are the same machine's, but leave slack for certificate checks that
# compare "not before" against a clock read a moment earlier.
_BACKDATE = datetime.timedelta(minutes=5)
# The common name of the API server's proxy client certificate (the aggregation layer's), as kubeadm names it;
# aggregated servers accept request headers only from a client of this name (--requestheader-allowed-names).
FRONT_PROXY_CLIENT_NAME = "front-proxy-client"


@dataclass(frozen=True)
class CertificatePair:
    """A certificate and its private key, written as PEM files."""

    certificate: Path
    key: Path


@dataclass(frozen=True)
class ClusterPki:
    """Every file of the PKI, as the components' flags need them."""

    ca: CertificatePair
    apiserver: CertificatePair
    # Served by the nodes' kubelets, where the API server reaches them (`kubectl logs`, `exec`).
    kubelet: CertificatePair
    admin: CertificatePair
    controller_manager: CertificatePair
    scheduler: CertificatePair
    service_account_private_key: Path
    service_account_public_key: Path
    # The API aggregation layer: the API server proxies requests for an APIService's group to its server
    # (Kueue's visibility server) as this client, and that server trusts the user named in the request's
    # headers only from a client certificate of this CA, which must not be the CA of ordinary clients.
    front_proxy_ca: CertificatePair
    front_proxy_client: CertificatePair


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        # Kubernetes maps the certificate's organizations to the user's groups.
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _make_ca(
    directory: Path, file_stem: str = "ca", common_name: str = "batchmark-test-ca"
) -> tuple[CertificatePair, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    name = _name(common_name)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pair = CertificatePair(certificate=directory / f"{file_stem}.crt", key=directory / f"{file_stem}.key")
    pair.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair, key, certificate


def _issue(
    directory: Path,
    file_stem: str,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    *,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_certificate: x509.Certificate,
    alternative_names: list[x509.GeneralName] | None = None,
) -> CertificatePair:
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if alternative_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    pair = CertificatePair(certificate=directory / f"{file_stem}.crt", key=directory / f"{file_stem}.key")
    pair.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def make_serving_pair(directory: Path, file_stem: str, common_name: str) -> CertificatePair:
    """A serving certificate for localhost and 127.0.0.1, issued by a CA of its own (in `directory/ca/`), for a
    local server such as a webhook server that must have a certificate although no client calls it."""
    ca_directory = directory / "ca"
    ca_directory.mkdir(parents=True, exist_ok=True)
    _, ca_key, ca_certificate = _make_ca(ca_directory)
    return _issue(
        directory,
        file_stem,
        _name(common_name),
        ExtendedKeyUsageOID.SERVER_AUTH,
        ca_key=ca_key,
        ca_certificate=ca_certificate,
        alternative_names=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))],
    )


def make_cluster_pki(directory: Path, extra_addresses: Sequence[str] = ()) -> ClusterPki:
    """Write a new CA, the serving and client certificates, and the service-account key pair.

    extra_addresses: IP addresses the API server and the nodes are reached at besides 127.0.0.1 (the pod
    network's, where pods run in containers of their own)."""
    extra_names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(address)) for address in extra_addresses]
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key, ca_certificate = _make_ca(directory)

    serving_names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        *extra_names,
    ]
    apiserver = _issue(
        directory,
        "apiserver",
        _name("kube-apiserver"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        ca_key=ca_key,
        ca_certificate=ca_certificate,
        alternative_names=serving_names,
    )

    kubelet = _issue(
        directory,
        "kubelet",
        _name("batchmark-kubelet"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        ca_key=ca_key,
        ca_certificate=ca_certificate,
        alternative_names=[
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
            *extra_names,
        ],
    )

    def client(file_stem: str, user: str, group: str | None = None) -> CertificatePair:
        return _issue(
            directory,
            file_stem,
            _name(user, group),
            ExtendedKeyUsageOID.CLIENT_AUTH,
            ca_key=ca_key,
            ca_certificate=ca_certificate,
        )

    # The user names below are the ones Kubernetes' bootstrap RBAC policy grants the components' roles to.
    admin = client("admin", "batchmark-admin", "system:masters")
    controller_manager = client("controller-manager", "system:kube-controller-manager")
    scheduler = client("scheduler", "system:kube-scheduler")

    front_proxy_ca, front_proxy_key, front_proxy_certificate = _make_ca(
        directory, "front-proxy-ca", "batchmark-test-front-proxy-ca"
    )
    front_proxy_client = _issue(
        directory,
        "front-proxy-client",
        _name(FRONT_PROXY_CLIENT_NAME),
        ExtendedKeyUsageOID.CLIENT_AUTH,
        ca_key=front_proxy_key,
        ca_certificate=front_proxy_certificate,
    )

    service_account_key = _new_key()
    service_account_private_key = directory / "service-account.key"
    _write_key(service_account_key, service_account_private_key)
    service_account_public_key = directory / "service-account.pub"
    service_account_public_key.write_bytes(
        service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterPki(
        ca=ca,
        apiserver=apiserver,
        kubelet=kubelet,
        admin=admin,
        controller_manager=controller_manager,
        scheduler=scheduler,
        service_account_private_key=service_account_private_key,
        service_account_public_key=service_account_public_key,
        front_proxy_ca=front_proxy_ca,
        front_proxy_client=front_proxy_client,
    )
