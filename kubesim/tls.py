"""The serving certificate: kubesim speaks HTTPS as kube-apiserver's secure port does.

A cluster CA and a serving certificate signed by it are made at the first start on a state dir and kept
there (``ca.crt``; ``apiserver.crt`` and ``apiserver.key``, the key mode 0600); the kubeconfig carries the
CA. HTTPS is not decoration: kubectl (client-go) sends a kubeconfig's credentials only over TLS, so a
bearer token over plain HTTP would not reach the server from kubectl. The serving certificate names
``localhost``, ``127.0.0.1``, ``::1`` and the address clients are told to use; it is remade (same CA) when
that address changes or it nears its end.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAYS = 3650
_RENEW_BEFORE = datetime.timedelta(days=30)


@dataclass(frozen=True)
class ServingFiles:
    """Where the CA certificate, the serving certificate and its key are."""

    ca_cert: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        """The server side's TLS context (TLS 1.2 and later)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        return context

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this cluster's CA (for raw HTTPS requests)."""
        return ssl.create_default_context(cafile=str(self.ca_cert))


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _names(host: str) -> list[x509.GeneralName]:
    wanted = dict.fromkeys(["localhost", "127.0.0.1", "::1", host])
    names: list[x509.GeneralName] = []
    for name in wanted:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            names.append(x509.DNSName(name))
    return names


def _load_ca(state_dir: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = state_dir / "ca.crt", state_dir / "ca.key"
    if cert_path.is_file() and key_path.is_file():
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        if isinstance(key, ec.EllipticCurvePrivateKey):
            return x509.load_pem_x509_certificate(cert_path.read_bytes()), key
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubesim-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _current(cert_path: Path, host: str, ca: x509.Certificate) -> bool:
    """Whether the serving certificate on disk is signed by ``ca``, names ``host`` and is not near its end."""
    if not cert_path.is_file():
        return False
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    if cert.issuer != ca.subject or cert.not_valid_after_utc - _RENEW_BEFORE < datetime.datetime.now(
        datetime.UTC
    ):
        return False
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(_names(host)) <= set(names)


def serving_files(state_dir: Path, host: str = "127.0.0.1") -> ServingFiles:
    """The state dir's CA and a serving certificate for ``host``, made when missing or out of date."""
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _load_ca(state_dir)
    files = ServingFiles(state_dir / "ca.crt", state_dir / "apiserver.crt", state_dir / "apiserver.key")
    if _current(files.cert, host, ca) and files.key.is_file():
        return files
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_names(host)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(files.key, _key_pem(key))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return files
