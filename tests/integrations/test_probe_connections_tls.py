"""A guard for the pinning of MCP requests to their checked address: an https server is still
reached by its name, its certificate verified for that name (the TLS server name is sent
although the connection goes to the address)."""

import datetime
import socket
import ssl
import threading
import time

import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from integrations import sources
from tests.integrations.test_sources import add_crm


def certificates(folder, host: str):
    """A certificate authority of the test's own and a certificate it signed for HOST."""

    def name(common):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder().subject_name(name("test ca")).issuer_name(name("test ca"))
        .public_key(ca_key.public_key()).serial_number(1).not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    cert = (
        x509.CertificateBuilder().subject_name(name(host)).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(2).not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = {n: str(folder / f"{n}.pem") for n in ("ca", "cert", "key")}
    with open(paths["ca"], "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["cert"], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths["key"], "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return paths


@pytest.fixture
def tls_crm(tmp_path, monkeypatch, settings):
    """The SDK's MCP server over https as crm.example (resolved to 127.0.0.1 here), trusted
    through the test's own certificate authority."""
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    paths = certificates(tmp_path, "crm.example")
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in ("crm.example", b"crm.example"):
            host = "127.0.0.1"
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    trusting = ssl.create_default_context(cafile=paths["ca"])
    transport = sources.httpx2.AsyncHTTPTransport
    monkeypatch.setattr(
        sources.httpx2,
        "AsyncHTTPTransport",
        lambda **options: transport(verify=trusting, **options),
    )
    server = MCPServer("tls-standin")

    @server.tool()
    def hello() -> str:
        """Say hello."""
        return "hello over tls"

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # The server checks the Host header against its own name, as a real one behind TLS does.
    security = TransportSecuritySettings(allowed_hosts=["crm.example:*"])
    config = uvicorn.Config(
        server.streamable_http_app(transport_security=security), log_level="warning", lifespan="on", access_log=False,
        ssl_certfile=paths["cert"], ssl_keyfile=paths["key"],
    )  # fmt: skip
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not running.started:
        assert time.monotonic() < deadline, "the MCP stand-in did not start"
        time.sleep(0.02)
    yield f"https://crm.example:{sock.getsockname()[1]}/mcp"
    running.should_exit = True
    thread.join(10)
    sock.close()


def test_an_https_mcp_server_is_reached_by_name_at_its_checked_address(alice, team_a, tls_crm):
    source = add_crm(alice, team_a, tls_crm)
    assert source.problem == "" and [f["name"] for f in source.functions] == ["hello"]
    assert sources.call_mcp(source, "hello", {}) == "hello over tls"
