"""The gateway's SigV4 (src/providers/bedrock/sign.rs, the `aws-sigv4` crate) against botocore's.

tests/fixtures/bedrock/sigv4_vector.json holds requests signed by the Rust signer; the Rust unit
test `providers::bedrock::sign::tests::signatures_match_the_vector_botocore_checks` proves the
signer still produces exactly that file, and this test recomputes every signature with botocore.
The URLs are checked against what botocore's own bedrock-runtime client sends for the same
model id. No gateway needed."""

import json
from pathlib import Path

import botocore.session
import pytest
from botocore.awsrequest import AWSResponse

from sigv4_check import recompute, signed_header_names

VECTORS = json.loads((Path(__file__).parent.parent / "fixtures/bedrock/sigv4_vector.json").read_text())


@pytest.mark.parametrize("v", VECTORS, ids=[v["name"] for v in VECTORS])
def test_botocore_recomputes_the_rust_signature(v):
    added = dict(v["added_headers"])
    sent = dict(v["headers"]) | added
    want = recompute(
        v["method"], v["url"], sent, v["body"].encode(), v["access_key_id"], v["secret_access_key"],
        v["region"], v["service"], session_token=v["session_token"],
    )
    assert added["authorization"] == want
    # What botocore adds for bedrock-runtime, no more: no x-amz-content-sha256 header.
    expected = {"authorization", "x-amz-date"} | ({"x-amz-security-token"} if v["session_token"] else set())
    assert set(added) == expected
    if v["session_token"]:
        assert added["x-amz-security-token"] == v["session_token"]
        assert "x-amz-security-token" in signed_header_names(want)
    assert "user-agent" not in signed_header_names(want)


class _Raw:
    def stream(self, **_):
        yield b"{}"

    def read(self, *_, **__):
        return b"{}"


def _botocore_converse(model_id: str, region: str, endpoint_url: str | None = None) -> dict:
    """The request botocore's own client sends for Converse (captured before it leaves)."""
    client = botocore.session.get_session().create_client(
        "bedrock-runtime", region_name=region, endpoint_url=endpoint_url,
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    )
    seen = {}

    def capture(request, **_):
        seen.update(url=request.url, headers={k: (v.decode() if isinstance(v, bytes) else v)
                                              for k, v in request.headers.items()}, body=request.body)
        return AWSResponse(request.url, 200, {"content-type": "application/json"}, _Raw())

    client.meta.events.register("before-send.bedrock-runtime.Converse", capture)
    client.converse(modelId=model_id, messages=[{"role": "user", "content": [{"text": "Hello"}]}])
    assert client.meta.service_model.signing_name == "bedrock"
    return seen


@pytest.mark.parametrize(
    "model_id,region,endpoint,vector",
    [
        ("anthropic.claude-3-haiku-20240307-v1:0", "us-east-1", None, 0),
        ("arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.anthropic.claude-3-haiku-20240307-v1:0",
         "eu-west-1", "http://127.0.0.1:18080", 2),
    ],
)
def test_the_signed_url_is_the_one_botocore_sends(model_id, region, endpoint, vector):
    sent = _botocore_converse(model_id, region, endpoint)
    assert sent["url"] == VECTORS[vector]["url"]


def test_the_checker_recomputes_botocores_own_signature():
    """sigv4_check itself, on a request boto's client signed: the recomputation is exact."""
    sent = _botocore_converse("anthropic.claude-3-haiku-20240307-v1:0", "us-east-1")
    want = recompute("POST", sent["url"], sent["headers"], sent["body"], "AKIDEXAMPLE",
                     "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1")
    assert sent["headers"]["Authorization"] == want
