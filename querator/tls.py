"""TLS contexts from the ``*-tls-*`` settings (docs/configuration.md, "TLS"), built once at start-up.

A file that cannot be read or parsed stops the server with the setting's name (a ConfigError), not at the
first connection.
"""

from __future__ import annotations

import ssl

from querator.config import ConfigError, ServerConfig


def _load(setting: str, path: str, context: ssl.SSLContext, key: str = "") -> None:
    try:
        if key:
            context.load_cert_chain(path, key)
        else:
            context.load_verify_locations(path)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"{setting} is invalid; cannot load '{path}': {e.strerror or e}") from None


def client_context(setting: str, ca_file: str, cert_file: str = "", key_file: str = "") -> ssl.SSLContext:
    """A context that verifies servers against ``ca_file`` (the system's CAs when "") and presents
    ``cert_file`` when given; ``setting`` is the prefix of the settings named in errors."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if ca_file:
        _load(f"{setting}-ca-file", ca_file, context)
    if cert_file:
        _load(f"{setting}-cert-file", cert_file, context, key_file)
    return context


def server_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The API listener's context; None for plain HTTP."""
    if not config.tls_cert_file:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    _load("tls-cert-file", config.tls_cert_file, context, config.tls_key_file)
    if config.tls_client_ca_file:
        _load("tls-client-ca-file", config.tls_client_ca_file, context)
        # Optional at the handshake: clients need none, but a certificate that is presented must verify,
        # and the nodes' forwarded requests must come with one (querator.auth.ApiKeys).
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def cluster_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The context this node forwards to the others with; None for plain HTTP (its own API is)."""
    if not config.tls_cert_file:
        return None
    return client_context(
        "cluster-tls", config.cluster_tls_ca_file, config.cluster_tls_cert_file, config.cluster_tls_key_file
    )
