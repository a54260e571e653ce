"""The lab's certificates: one CA, the API server's serving cert, client certs, SA signing key.

Kubernetes authenticates client certificates by subject: CN is the user name and O the groups, so
``system:masters`` for the admin and the built-in ``system:kube-controller-manager`` /
``system:kube-scheduler`` users, which the API server's default RBAC policy already binds. ECDSA
P-256 keys keep generation instant. Files are PEM under ``DIR/pki``; keys are written 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 365
# The in-cluster names of the ``kubernetes`` Service, so a pod-side client would also verify.
APISERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")


@dataclass(frozen=True, slots=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class Pki:
    """Paths of every file the control plane components are started with."""

    ca: CertPair
    apiserver: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    kwok: CertPair
    sa_key: Path
    sa_pub: Path


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def _new_ca(directory: Path) -> CertPair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = _name("gpufleet-lab-ca")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
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
    pair = CertPair(directory / "ca.crt", directory / "ca.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def _issue(
    ca: CertPair,
    directory: Path,
    stem: str,
    cn: str,
    *,
    orgs: tuple[str, ...] = (),
    server: bool = False,
) -> CertPair:
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                if server
                else [ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in APISERVER_DNS]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in APISERVER_IPS]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def _pki_paths(directory: Path) -> Pki:
    def pair(stem: str) -> CertPair:
        return CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")

    return Pki(
        ca=pair("ca"),
        apiserver=pair("apiserver"),
        admin=pair("admin"),
        controller_manager=pair("controller-manager"),
        scheduler=pair("scheduler"),
        kwok=pair("kwok"),
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
    )


def ensure_pki(directory: Path) -> Pki:
    """Create the lab's PKI in ``directory`` unless a complete one is already there.

    Reusing it across ``lab up`` runs keeps existing kubeconfigs and service-account tokens valid
    for a restarted cluster on the same state directory.
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = _pki_paths(directory)
    files = [
        p
        for pair in (
            paths.ca,
            paths.apiserver,
            paths.admin,
            paths.controller_manager,
            paths.scheduler,
            paths.kwok,
        )
        for p in (pair.cert, pair.key)
    ] + [paths.sa_key, paths.sa_pub]
    if all(f.is_file() for f in files):
        return paths
    ca = _new_ca(directory)
    _issue(ca, directory, "apiserver", "kube-apiserver", server=True)
    _issue(ca, directory, "admin", "gpufleet-lab-admin", orgs=("system:masters",))
    _issue(ca, directory, "controller-manager", "system:kube-controller-manager")
    _issue(ca, directory, "scheduler", "system:kube-scheduler")
    # KWOK plays every kubelet (node status, leases, pod status, deletions): admin rights.
    _issue(ca, directory, "kwok", "kwok-controller", orgs=("system:masters",))
    sa = ec.generate_private_key(ec.SECP256R1())
    _write_key(sa, paths.sa_key)
    paths.sa_pub.write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return paths
