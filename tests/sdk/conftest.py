"""Fixtures: a stand-in upstream, and the built `tollgate` binary pointed at it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from standin import Standin

# Everything here talks to 127.0.0.1; a developer's HTTP(S)_PROXY must not reroute the SDKs.
for var in ("NO_PROXY", "no_proxy"):
    os.environ[var] = ",".join(filter(None, [os.environ.get(var), "127.0.0.1", "localhost"]))

OPENAI_SECRET = "sk-standin-openai-secret"
ANTHROPIC_SECRET = "sk-ant-standin-secret"


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """n distinct free ports: all sockets stay bound until every port is picked, so the kernel
    cannot hand one port out twice (gateway and management on one port answer each other's calls)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http(method: str, url: str, body=None, key: str | None = None) -> tuple[int, object]:
    """(status, parsed JSON or text); error statuses are returned, not raised."""
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


@dataclass
class Gateway:
    gateway_url: str
    mgmt_url: str
    metrics_url: str
    key: str
    dir: Path
    proc: subprocess.Popen

    def logs(self) -> str:
        return "".join(
            f"--- {p.name} ---\n{p.read_text(errors='replace')}\n" for p in sorted(self.dir.glob("serve*.log"))
        )


@pytest.fixture(scope="session")
def standin():
    s = Standin().start()
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _fresh_recording(standin):
    # Each test asserts on what the upstream saw during that test alone.
    standin.clear()


@pytest.fixture(scope="session")
def gateway(standin, tmp_path_factory):
    gw = start_gateway(standin, tmp_path_factory.mktemp("tollgate"))
    try:
        yield gw
    finally:
        _stop(gw.proc)


def start_gateway(standin: Standin, data: Path, extra_env: dict[str, str] | None = None) -> Gateway:
    """`tollgate serve` on free ports with a fresh tenant whose openai and anthropic credentials
    point at `standin`; the caller stops it (`stop_gateway`)."""
    binary = os.environ.get("TOLLGATE_BIN")
    if not binary or not Path(binary).is_file():
        pytest.fail(
            f"TOLLGATE_BIN must point at the built tollgate binary (got {binary!r}); "
            "run through `cargo test --test sdk_python`, or set it to target/debug/tollgate",
            pytrace=False,
        )
    # Hermetic: a developer's own TOLLGATE_* settings (database, config) must not leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")}
    env.update(TOLLGATE_DATA_DIR=str(data), TOLLGATE_LOG="info", **(extra_env or {}))

    out = subprocess.run([binary, "tenant", "create", "--name", "sdk", "--json"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"tenant create failed:\n{out.stderr}"
    try:
        key = json.loads(out.stdout)["key"]
    except (ValueError, KeyError):
        pytest.fail(f"tenant create --json must print one JSON line with a key, got:\n{out.stdout}", pytrace=False)

    # Ports are picked then released, so another process may grab one first: retry on early exit.
    for attempt in range(3):
        ports = free_ports(3)
        listen = {f"TOLLGATE_{name}_LISTEN": f"127.0.0.1:{p}"
                  for name, p in zip(("GATEWAY", "MANAGEMENT", "METRICS"), ports)}
        with open(data / f"serve-{attempt}.log", "wb") as log:
            proc = subprocess.Popen([binary, "serve"], env={**env, **listen}, stdout=log, stderr=subprocess.STDOUT)
        gw = Gateway(*(f"http://127.0.0.1:{p}" for p in ports), key=key, dir=data, proc=proc)
        if _wait_ready(gw):
            break
        exited = gw.proc.poll() is not None
        _stop(gw.proc)
        if not exited:
            pytest.fail(f"tollgate serve did not answer GET /status within 30 s:\n{gw.logs()}", pytrace=False)
    else:
        pytest.fail(f"tollgate serve exited at start-up, 3 times:\n{gw.logs()}", pytrace=False)

    try:
        for provider, secret in (("openai", OPENAI_SECRET), ("anthropic", ANTHROPIC_SECRET)):
            status, body = http("PUT", f"{gw.mgmt_url}/v1/providers/{provider}",
                                {"api_key": secret, "base_url": standin.url}, key)
            assert status == 200, f"PUT /v1/providers/{provider}: {status} {body}\n{gw.logs()}"
    except BaseException:
        _stop(gw.proc)
        raise
    return gw


def stop_gateway(gw: Gateway):
    _stop(gw.proc)


def _wait_ready(gw: Gateway) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if gw.proc.poll() is not None:
            return False
        try:
            if http("GET", f"{gw.mgmt_url}/status")[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def _stop(proc: subprocess.Popen):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    # A failing SDK call is usually explained by the gateway's log, so show it with the failure.
    report = yield
    gw = getattr(item, "funcargs", {}).get("gateway")
    if report.failed and isinstance(gw, Gateway):
        report.sections.append(("tollgate serve log", gw.logs()))
    return report
