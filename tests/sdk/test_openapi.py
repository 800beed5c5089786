"""The management API's `/openapi.json`: valid OpenAPI 3.1 (openapi-spec-validator), and fuzzed
with schemathesis against a running instance: no 5xx, every response as documented, no hang,
and the server alive afterwards. The fuzz run is bounded (`FUZZ_SECONDS`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.readers import read_from_filename

from conftest import http, start_gateway, stop_gateway

# The whole schemathesis run, all phases; a run that outlives this by far has hung.
FUZZ_SECONDS = int(os.environ.get("TOLLGATE_FUZZ_SECONDS", "60"))
HOOKS = Path(__file__).with_name("st_hooks.py")


def test_openapi_document_is_valid_openapi_3_1(gateway, tmp_path):
    status, doc = http("GET", f"{gateway.mgmt_url}/openapi.json")
    assert status == 200 and isinstance(doc, dict), doc
    assert doc["openapi"] == "3.1.0"
    path = tmp_path / "openapi.json"
    path.write_text(json.dumps(doc))
    spec, _ = read_from_filename(str(path))
    validate(spec)  # raises with the offending pointer when the document is not valid 3.1


@pytest.fixture
def fuzz_gateway(standin, tmp_path):
    # A gateway of its own: the fuzzer revokes keys, replaces credentials and deletes what it
    # finds. Provider defaults point at the stand-in too, so a credential stored without a
    # base_url and then tested never leaves this machine.
    config = tmp_path / "tollgate.yaml"
    config.write_text(
        f"providers:\n  openai:\n    base_url: \"{standin.url}\"\n"
        f"  anthropic:\n    base_url: \"{standin.url}\"\n    version: \"2023-06-01\"\n"
    )
    data = tmp_path / "data"
    data.mkdir()
    # Webhook URLs are rewritten to the stand-in on 127.0.0.1 (st_hooks.py): allow it.
    env = {"TOLLGATE_CONFIG": str(config), "TOLLGATE_WEBHOOK_ALLOW_PRIVATE_URLS": "true"}
    # tests/sdk_python.rs makes a fresh PostgreSQL database when a server answers.
    if os.environ.get("TOLLGATE_FUZZ_DATABASE_URL"):
        env["TOLLGATE_DATABASE_URL"] = os.environ["TOLLGATE_FUZZ_DATABASE_URL"]
    gw = start_gateway(standin, data, env)
    yield gw
    stop_gateway(gw)


def test_schemathesis_finds_no_server_error_and_no_undocumented_response(fuzz_gateway, standin, tmp_path):
    gw = fuzz_gateway
    report = tmp_path / "schemathesis.xml"
    cmd = [
        sys.executable, "-m", "schemathesis.cli", "run", f"{gw.mgmt_url}/openapi.json",
        "--header", f"Authorization: Bearer {gw.key}",
        "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                    "response_headers_conformance,response_schema_conformance",
        "--max-time", str(FUZZ_SECONDS),
        "--request-timeout", "10",
        "--generation-database", "none",
        "--no-color",
        "--report", "junit", "--report-junit-path", str(report),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "st_hooks", "TOLLGATE_FUZZ_UPSTREAM": standin.url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(HOOKS.parent), os.environ.get("PYTHONPATH")]))}
    try:
        run = subprocess.run(cmd, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=FUZZ_SECONDS * 3 + 60)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"schemathesis did not finish in {e.timeout} s: a request hung?\n{e.stdout or ''}\n{gw.logs()}")
    tail = "\n".join(run.stdout.splitlines()[-150:])
    assert run.returncode == 0, f"schemathesis failed (exit {run.returncode}):\n{tail}\n{run.stderr[-3000:]}"
    print(tail)

    # Still serving, and still answering authenticated calls.
    assert gw.proc.poll() is None, f"tollgate exited during fuzzing:\n{gw.logs()}"
    status, body = http("GET", f"{gw.mgmt_url}/status")
    assert status == 200 and body["status"] in ("operational", "degraded"), body
    status, _ = http("GET", f"{gw.mgmt_url}/openapi.json")
    assert status == 200
