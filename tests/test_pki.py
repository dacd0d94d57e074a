"""The fleet CA's client certificates: their names on the controller, the files a pin reads (current and replaced),
and fingerprints as HAProxy's ssl_c_der,sha2(256),hex computes them."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from ansible_collections.vllm.fleet.plugins.plugin_utils import pki


def test_client_certificate_names_and_files() -> None:
    """Each kind has its stem; a pin reads each host's current certificate and the one it replaced."""
    assert pki.client_cert_name("gw1", "gateway") == "gateway-client-gw1"
    assert pki.client_cert_name("mon", "monitoring") == "monitoring-client-mon"
    assert pki.client_cert_files(["gw1", "gw2"], "/pki", "gateway") == [
        "/pki/gateway-client-gw1.crt", "/pki/gateway-client-gw1.previous.crt",
        "/pki/gateway-client-gw2.crt", "/pki/gateway-client-gw2.previous.crt"]
    with pytest.raises(KeyError):
        pki.client_cert_name("gw1", "anyone")


def test_fingerprints_are_the_sha256_of_each_der(tmp_path: Path) -> None:
    """The fingerprint is openssl's DER digest, each once, sorted; blank entries are skipped."""
    pems = []
    for n in range(2):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-noenc", "-keyout", str(tmp_path / f"{n}.key"), "-out", str(tmp_path / f"{n}.crt"),
                        "-days", "1", "-subj", f"/CN=c{n}"], check=True, capture_output=True)
        pems.append((tmp_path / f"{n}.crt").read_text())
    der = [subprocess.run(["openssl", "x509", "-in", str(tmp_path / f"{n}.crt"), "-outform", "DER"],
                          check=True, capture_output=True).stdout for n in range(2)]
    assert pki.fingerprints([pems[1], pems[0], pems[1], "\n"]) == sorted(hashlib.sha256(d).hexdigest() for d in der)
