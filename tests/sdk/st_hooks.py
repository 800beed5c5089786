"""schemathesis hooks for test_openapi.py (loaded through SCHEMATHESIS_HOOKS).

`POST /v1/providers/{provider}/test` calls the stored credential's base URL. The fuzzer must
not make the gateway reach out to whatever host it invents, so every credential body it sends
names the local stand-in as its base URL; every other field stays as generated. Likewise a
webhook endpoint's `url` (the gateway POSTs events there) is pointed at the stand-in.
"""

import os

import schemathesis

STANDIN = os.environ["TOLLGATE_FUZZ_UPSTREAM"]


@schemathesis.hook
def before_call(context, case, **kwargs):
    if case.method.upper() == "PUT" and case.operation.path.startswith("/v1/providers/"):
        if isinstance(case.body, dict):
            case.body["base_url"] = STANDIN
    if case.method.upper() == "POST" and case.operation.path == "/v1/webhook-endpoints":
        if isinstance(case.body, dict) and isinstance(case.body.get("url"), str):
            case.body["url"] = f"{STANDIN}/webhooks"
