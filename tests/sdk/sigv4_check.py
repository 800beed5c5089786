"""Recomputes the AWS SigV4 `Authorization` of a recorded request with botocore, the signer
boto3 uses, so a test can check what the gateway signed against AWS's own client code.

`recompute` rebuilds the request botocore would have signed: the recorded headers that the
recorded `Authorization` names in `SignedHeaders` (AWS verifies exactly those), the recorded
`x-amz-date` as botocore's clock, and the session token when one was used. Equal strings mean
the two signers agree on the canonical request, the scope and the key derivation."""

from __future__ import annotations

import datetime
import re
from unittest import mock

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

SIGV4_TIMESTAMP = "%Y%m%dT%H%M%SZ"
# Headers botocore sets itself while signing; the recorded values are its inputs, not headers.
SIGNER_SET = {"authorization", "x-amz-date", "x-amz-security-token"}


def signed_header_names(authorization: str) -> set[str] | None:
    """The `SignedHeaders` list of an Authorization header, or None when it has none."""
    match = re.search(r"SignedHeaders=([^,\s]+)", authorization or "")
    return set(match.group(1).split(";")) if match else None


def _lower(headers: dict) -> dict:
    return {k.lower(): v for k, v in headers.items()}


def recompute(
    method: str,
    url: str,
    headers: dict,
    body: bytes,
    access_key: str,
    secret_key: str,
    region: str,
    service: str = "bedrock",
    session_token: str | None = None,
) -> str:
    """The Authorization header botocore's SigV4Auth computes for this request at the time in
    its `x-amz-date` header (`headers` are the recorded request's, any case)."""
    recorded = _lower(headers)
    amz_date = recorded["x-amz-date"]
    names = signed_header_names(recorded.get("authorization", ""))
    to_sign = {
        k: v for k, v in recorded.items() if k not in SIGNER_SET and (names is None or k in names)
    }
    request = AWSRequest(method=method, url=url, headers=to_sign, data=body)
    at = datetime.datetime.strptime(amz_date, SIGV4_TIMESTAMP).replace(tzinfo=datetime.timezone.utc)
    credentials = Credentials(access_key, secret_key, session_token)
    # botocore reads its clock through this function; pinning it replays the recorded instant.
    with mock.patch("botocore.auth.get_current_datetime", return_value=at.replace(tzinfo=None)):
        SigV4Auth(credentials, service, region).add_auth(request)
    return request.headers["Authorization"]
