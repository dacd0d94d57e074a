"""The fleet CA's client certificates: their names on the controller, and the fingerprints the ingresses and gateways
pin, so that a certificate of the fleet CA is admitted only while it is a current gateway's or monitoring host's."""

from __future__ import annotations

import hashlib

# The controller's file stem of each kind of client certificate, before the host's name.
CLIENT_STEMS = {"gateway": "gateway-client-", "monitoring": "monitoring-client-"}
# A replaced client certificate, kept until its host runs the new one.
PREVIOUS_SUFFIX = ".previous"


def client_cert_name(host: str, kind: str) -> str:
    """Return the controller's file stem of a host's client certificate of one kind (gateway, monitoring)."""
    return CLIENT_STEMS[kind] + host


def client_cert_files(hosts: list[str], pki_dir: str, kind: str) -> list[str]:
    """Return the certificate files the hosts' client certificates of one kind may be in: each one's current and,
    while its host still runs it, the one it replaced."""
    return [f"{pki_dir}/{client_cert_name(host, kind)}{suffix}.crt" for host in hosts for suffix in ("", PREVIOUS_SUFFIX)]


def fingerprints(pems: list[str]) -> list[str]:
    """Return the sorted lowercase hex SHA-256 of each PEM certificate's DER, as HAProxy's ssl_c_der,sha2(256) reads
    a client's."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    return sorted({hashlib.sha256(x509.load_pem_x509_certificate(pem.encode()).public_bytes(
        serialization.Encoding.DER)).hexdigest() for pem in pems if pem.strip()})
