"""Throwaway certificate authorities for the TLS tests, made with the ``openssl`` command in the test's tmp
dir (never committed): a CA, and certificates it issues for ``127.0.0.1``/``localhost`` that serve as
both server and client certificates."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

KEY_ARGS = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class Authority:
    """A self-signed CA in ``directory``; ``issue`` makes a certificate signed by it."""

    def __init__(self, directory: Path, name: str) -> None:
        if shutil.which("openssl") is None:
            pytest.skip("no openssl command to make test certificates with")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.cert = directory / f"{name}-ca.crt"
        self.key = directory / f"{name}-ca.key"
        _openssl(
            "req", "-x509", *KEY_ARGS, "-keyout", str(self.key), "-out", str(self.cert), "-days", "2",
            "-subj", f"/CN={name} test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-addext", "subjectKeyIdentifier=hash",
        )  # fmt: skip

    def issue(self, name: str, common_name: bool = True) -> Issued:
        """``common_name`` False: a subject without CN (etcd's gateway refuses client certificates with
        one once authentication is on)."""
        base = self.directory / name
        csr, extensions = base.with_suffix(".csr"), base.with_suffix(".ext")
        issued = Issued(base.with_suffix(".crt"), base.with_suffix(".key"))
        extensions.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid\n"
        )
        _openssl(
            "req",
            *KEY_ARGS,
            "-keyout",
            str(issued.key),
            "-out",
            str(csr),
            "-subj",
            f"/CN={name}" if common_name else f"/O={name}",
        )
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-out", str(issued.cert), "-days", "2", "-extfile", str(extensions),
        )  # fmt: skip
        return issued

    def client_context(self, client: Issued | None = None) -> ssl.SSLContext:
        """What a client trusting this CA (and presenting ``client``, if given) connects with."""
        context = ssl.create_default_context(cafile=str(self.cert))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
        return context
