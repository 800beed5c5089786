"""TLS on both sides, through rustls: the openai SDK talks HTTPS to the gateway, and the gateway
talks HTTPS to a provider whose certificate it trusts through `upstream.ca_file`."""

import json
import os
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from conftest import free_ports, _stop
from standin import Standin


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         # webpki refuses a CA certificate as the server's own; this one is a self-signed leaf.
         "-addext", "basicConstraints=critical,CA:FALSE"],
        check=True, capture_output=True,
    )
    return crt, key


@pytest.fixture(scope="module")
def tls_standin(cert):
    s = Standin()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    s._server.socket = ctx.wrap_socket(s._server.socket, server_side=True)
    s.start()
    yield s
    s.stop()


def https(method, url, ctx, body=None, key=None):
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        return r.status, json.loads(r.read() or b"null")


def test_tls_listeners_and_tls_upstream(cert, tls_standin, tmp_path):
    binary = os.environ["TOLLGATE_BIN"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")}
    env.update(TOLLGATE_DATA_DIR=str(tmp_path), TOLLGATE_LOG="info",
               TOLLGATE_TLS_CERT_FILE=str(cert[0]), TOLLGATE_TLS_KEY_FILE=str(cert[1]),
               TOLLGATE_UPSTREAM_CA_FILE=str(cert[0]))
    out = subprocess.run([binary, "tenant", "create", "--name", "tls", "--json"], env=env,
                         capture_output=True, text=True, check=True)
    key = json.loads(out.stdout)["key"]
    gw_port, mgmt_port, metrics_port = free_ports(3)
    env.update(TOLLGATE_GATEWAY_LISTEN=f"127.0.0.1:{gw_port}", TOLLGATE_MANAGEMENT_LISTEN=f"127.0.0.1:{mgmt_port}",
               TOLLGATE_METRICS_LISTEN=f"127.0.0.1:{metrics_port}")
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen([binary, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    ctx = ssl.create_default_context(cafile=str(cert[0]))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if https("GET", f"https://127.0.0.1:{mgmt_port}/status", ctx)[0] == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)

        upstream = f"https://127.0.0.1:{tls_standin._server.server_address[1]}"
        status, _ = https("PUT", f"https://127.0.0.1:{mgmt_port}/v1/providers/openai", ctx,
                          {"api_key": "sk-tls-upstream-secret", "base_url": upstream}, key)
        assert status == 200

        client = openai.OpenAI(base_url=f"https://127.0.0.1:{gw_port}/v1", api_key=key, max_retries=0,
                               http_client=openai.DefaultHttpxClient(verify=ctx))
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "Hello from stand-in"
        seen = tls_standin.to("/v1/chat/completions")
        assert seen and seen[-1].headers["authorization"] == "Bearer sk-tls-upstream-secret"

        # A plain-HTTP client gets no answer from a TLS listener.
        with pytest.raises(Exception):
            urllib.request.urlopen(f"http://127.0.0.1:{mgmt_port}/status", timeout=5)
    finally:
        _stop(proc)
        log.close()
