"""The lab PKI: every cert chains to the CA and names the identity Kubernetes expects."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gpufleet.lab.pki import ensure_pki


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_certificates_chain_to_the_ca_with_kubernetes_identities(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    ca = _load(pki.ca.cert)
    expected = {
        pki.admin: ("gpufleet-lab-admin", ["system:masters"]),
        pki.controller_manager: ("system:kube-controller-manager", []),
        pki.scheduler: ("system:kube-scheduler", []),
        pki.apiserver: ("kube-apiserver", []),
    }
    for pair, (cn, orgs) in expected.items():
        cert = _load(pair.cert)
        cert.verify_directly_issued_by(ca)
        subject = cert.subject
        assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == cn
        assert [a.value for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == orgs
        assert stat.S_IMODE(pair.key.stat().st_mode) == 0o600
    server = _load(pki.apiserver.cert)
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in sans.get_values_for_type(x509.IPAddress)
    assert "kubernetes.default.svc" in sans.get_values_for_type(x509.DNSName)
    eku = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    client_eku = _load(pki.admin.cert).extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert ExtendedKeyUsageOID.SERVER_AUTH not in client_eku.value


def test_existing_pki_is_reused(tmp_path: Path) -> None:
    first = ensure_pki(tmp_path)
    before = first.ca.cert.read_bytes()
    second = ensure_pki(tmp_path)
    assert second.ca.cert.read_bytes() == before
    second.kwok.key.unlink()  # incomplete: made anew
    assert ensure_pki(tmp_path).ca.cert.read_bytes() != before
