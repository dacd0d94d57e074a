"""What every HAProxy config of the kit holds, the gateway's and each ingress's: TLS 1.2 or newer with the fleet's
ciphers and no session tickets, a log line per error to the journal, HTTP mode and the connect timeout."""

from __future__ import annotations

# A failed connection to a backend on the fleet's own network is retried after this, not waited on.
CONNECT_TIMEOUT = "3s"


def _indented(lines: list[str]) -> str:
    """Return lines as one text, each indented as a section's line."""
    return "\n".join(f"    {line}" for line in lines)


def shared_lines(ciphers: list[str], servers: bool = False) -> dict[str, str]:
    """Return the lines every config shares, by section. `global`: TLS floors for listeners (and for connections to
    servers, when the instance makes TLS connections), logging to stdout, which the unit hands to the journal.
    `defaults`: HTTP, the global log without successful requests, the connect timeout."""
    tls = ["ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets", f"ssl-default-bind-ciphers {':'.join(ciphers)}"]
    if servers:
        tls += ["ssl-default-server-options ssl-min-ver TLSv1.2 no-tls-tickets",
                f"ssl-default-server-ciphers {':'.join(ciphers)}"]
    defaults = ["mode http", "log global", "option dontlog-normal", f"timeout connect {CONNECT_TIMEOUT}"]
    return {"global": _indented([*tls, "log stdout format raw daemon notice"]), "defaults": _indented(defaults)}
