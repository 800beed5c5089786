"""Independent verifier for Tollgate receipts, written from docs/receipts.md (§1, §2, §5) alone.

It shares no code with the server on purpose: an auditor must be able to check receipts with
nothing but the published byte-level contract, a SHA-256 and an Ed25519 implementation.

    python receipt_verifier.py export.jsonl keys.json

`export.jsonl` is GET /v1/receipts/export?format=jsonl, `keys.json` is
GET /v1/compliance/signing-keys. Exit status 0 only if every check holds.
"""

from __future__ import annotations

import base64
import binascii
import decimal
import hashlib
import json
import math
import re
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

# §1: exactly these members are signed; anything else on a record (thisHash, kind, ...) is not.
SIGNED_MEMBERS = (
    "v", "tenantId", "seq", "receiptId", "requestId", "actor", "provider", "model",
    "promptTokens", "completionTokens", "costUsd", "checks", "upstreamStatus", "ts", "prevHash",
)
# ... plus `subject`, signed on receipts of kind `admin` only (§1; log.md §8).
ADMIN_ONLY_MEMBER = "subject"
GENESIS_PREV_HASH = "0" * 64

_HEX64 = re.compile(r"[0-9a-f]{64}")
_TS = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_UPSTREAM_STATUSES = {"ok", "error", "timeout", "skipped"}


class ReceiptError(Exception):
    """A receipt (or the chain at a receipt) failed verification; `seq` says which one."""

    def __init__(self, seq, message: str):
        self.seq = seq
        super().__init__(f"seq {seq}: {message}")


# ---------------------------------------------------------------------------------------------
# RFC 8785 JSON Canonicalization Scheme
# ---------------------------------------------------------------------------------------------

def jcs_number(x) -> str:
    """ECMAScript Number::toString (ECMA-262 §7.1.12.1), which RFC 8785 §3.2.2.3 mandates."""
    if isinstance(x, bool):
        raise TypeError("booleans are not numbers")
    if isinstance(x, int):
        # JSON numbers are IEEE 754 doubles in JCS; an int a double cannot hold would be
        # silently changed by any other JCS implementation, so refuse it.
        if float(x) != x:
            raise ValueError(f"integer {x} is not exactly representable as an IEEE 754 double")
        x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"{x} is not allowed in JSON")
    if x == 0:
        return "0"  # also -0
    if x < 0:
        return "-" + jcs_number(-x)
    # repr() gives the shortest digit string that round-trips, which is what ECMAScript asks for;
    # only its layout (where the point goes, when to use an exponent) differs.
    _, digit_tuple, exp = decimal.Decimal(repr(x)).normalize().as_tuple()  # normalize: no trailing 0s
    digits = "".join(map(str, digit_tuple))
    k = len(digits)
    n = k + exp  # value = 0.<digits> * 10**n, in ECMA-262's terms
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


def _jcs(value) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return jcs_number(value)
    if isinstance(value, str):
        # Python's escaping with ensure_ascii=False is exactly RFC 8785 §3.2.2.2: only `"`, `\` and
        # control characters are escaped, short forms where JSON has them, else \u00xx lowercase.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(_jcs(v) for v in value) + "]"
    if isinstance(value, dict):
        # RFC 8785 §3.2.3: sort by UTF-16 code units, not by code points (they differ above U+FFFF).
        keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(_jcs(k) + ":" + _jcs(value[k]) for k in keys) + "}"
    raise TypeError(f"not a JSON value: {value!r}")


def jcs(value) -> bytes:
    # encode() raises on lone surrogates, which RFC 8785 requires rejecting.
    return _jcs(value).encode("utf-8")


def loads_strict(text: str):
    """json.loads, but duplicate member names are an error (they could hide a second value)."""
    def no_dupes(pairs):
        obj = {}
        for k, v in pairs:
            if k in obj:
                raise ValueError(f"duplicate member {k!r}")
            obj[k] = v
        return obj
    return json.loads(text, object_pairs_hook=no_dupes)


# ---------------------------------------------------------------------------------------------
# Keys, receipts, chains
# ---------------------------------------------------------------------------------------------

def key_id_of(raw_public_key: bytes) -> str:
    return hashlib.sha256(raw_public_key).hexdigest()[:16]


def load_key_registry(doc: dict) -> dict[str, Ed25519PublicKey]:
    """{keyId: public key} from GET /v1/compliance/signing-keys, checking each keyId (§1)."""
    registry = {}
    for entry in doc["keys"]:
        kid = entry["keyId"]
        if entry.get("algorithm") != "ed25519":
            raise ValueError(f"key {kid}: algorithm {entry.get('algorithm')!r}, expected 'ed25519'")
        raw = _b64(entry["publicKey"], f"key {kid}: publicKey")
        if len(raw) != 32:
            raise ValueError(f"key {kid}: public key is {len(raw)} bytes, expected 32")
        if key_id_of(raw) != kid:
            raise ValueError(f"key {kid}: keyId does not match sha256(public key)[0:16] = {key_id_of(raw)}")
        registry[kid] = Ed25519PublicKey.from_public_bytes(raw)
    return registry


def _b64(text, what: str) -> bytes:
    # §1: standard alphabet, padded. Accept only that exact form, so one signature has one spelling.
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, TypeError, ValueError) as e:
        raise ValueError(f"{what} is not valid base64: {e}") from None
    if base64.b64encode(raw).decode() != text:
        raise ValueError(f"{what} is not canonical padded standard base64")
    return raw


def canonical_members(record: dict) -> dict:
    """The signed receipt: exactly the §1 members, whatever else the record carries."""
    seq = record.get("seq")
    missing = [m for m in SIGNED_MEMBERS if m not in record]
    if missing:
        raise ReceiptError(seq, f"missing signed member(s) {missing}")
    receipt = {m: record[m] for m in SIGNED_MEMBERS}
    kind = record.get("kind")
    if kind == "admin" or (kind is None and ADMIN_ONLY_MEMBER in record):
        if not isinstance(record.get(ADMIN_ONLY_MEMBER), str):
            raise ReceiptError(seq, "an admin receipt must carry the signed string member 'subject'")
        receipt[ADMIN_ONLY_MEMBER] = record[ADMIN_ONLY_MEMBER]
    elif ADMIN_ONLY_MEMBER in record:
        raise ReceiptError(seq, f"'subject' is signed only on admin receipts, not on kind {kind!r}")
    _check_types(receipt)
    return receipt


def _check_types(r: dict):
    """§1's table. A wrong type would still hash and sign, so only a schema check catches it."""
    seq = r["seq"]

    def bad(member, why):
        raise ReceiptError(seq, f"member {member!r} = {r[member]!r}: {why}")

    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)

    if r["v"] != 1 or isinstance(r["v"], bool):
        bad("v", "format version must be 1")
    if not is_int(seq) or seq < 1:
        bad("seq", "must be an integer >= 1")
    for m in ("tenantId", "receiptId", "requestId", "actor", "provider", "model", "upstreamStatus", "ts", "prevHash"):
        if not isinstance(r[m], str):
            bad(m, "must be a string")
    for m in ("promptTokens", "completionTokens"):
        if not is_int(r[m]) or r[m] < 0:
            bad(m, "must be a non-negative integer")
    if isinstance(r["costUsd"], bool) or not isinstance(r["costUsd"], (int, float)):
        bad("costUsd", "must be a number")
    if not _UUID.fullmatch(r["receiptId"]):
        bad("receiptId", "must be a lowercase UUID")
    if r["upstreamStatus"] not in _UPSTREAM_STATUSES:
        bad("upstreamStatus", f"must be one of {sorted(_UPSTREAM_STATUSES)}")
    if not _TS.fullmatch(r["ts"]):
        bad("ts", "must be 'YYYY-MM-DD HH:MM:SS.mmm'")
    if not _HEX64.fullmatch(r["prevHash"]):
        bad("prevHash", "must be 64 lowercase hex characters")
    if not isinstance(r["checks"], list) or not all(
        isinstance(c, dict) and set(c) == {"name", "result"}
        and isinstance(c["name"], str) and isinstance(c["result"], str)
        for c in r["checks"]
    ):
        bad("checks", "must be an array of {name, result} string pairs")


def verify_receipt(receipt: dict, this_hash: str, signature: str, key_id: str,
                   keys: dict[str, Ed25519PublicKey]) -> bytes:
    """Check one receipt's hash, key id and signature (§1); returns its canonical bytes."""
    seq = receipt.get("seq")
    canonical = jcs(canonical_members(receipt))
    computed = hashlib.sha256(canonical).hexdigest()
    if this_hash != computed:
        raise ReceiptError(seq, f"thisHash {this_hash} != sha256(JCS(receipt)) {computed}")
    if key_id not in keys:
        raise ReceiptError(seq, f"keyId {key_id!r} is not in the signing-key registry")
    try:
        sig = _b64(signature, "signature")
    except ValueError as e:
        raise ReceiptError(seq, str(e)) from None
    try:
        keys[key_id].verify(sig, canonical)
    except InvalidSignature:
        raise ReceiptError(seq, f"Ed25519 signature does not verify under key {key_id}") from None
    return canonical


def verify_export(records: list[dict], keys: dict[str, Ed25519PublicKey],
                  from_seq: int = 1, anchor_hash: str = GENESIS_PREV_HASH) -> int:
    """Verify JSONL export records (§5) as one chain (§2) starting at `from_seq`.

    Raises ReceiptError at the first failure; returns the number of receipts verified.
    """
    prev_hash, tenant = anchor_hash, None
    for expected_seq, rec in enumerate(records, start=from_seq):
        seq = rec.get("seq")
        if seq != expected_seq:
            raise ReceiptError(expected_seq, f"gap or disorder in the chain: found seq {seq} here")
        missing = [m for m in ("this_hash", "signature", "key_id") if m not in rec]
        if missing:
            raise ReceiptError(seq, f"export line lacks chain field(s) {missing}")
        verify_receipt(rec, rec["this_hash"], rec["signature"], rec["key_id"], keys)
        if rec["prevHash"] != prev_hash:
            raise ReceiptError(seq, f"prevHash {rec['prevHash']} != thisHash of seq {seq - 1} ({prev_hash})")
        if tenant is not None and rec["tenantId"] != tenant:
            raise ReceiptError(seq, f"tenantId {rec['tenantId']!r} differs from the chain's {tenant!r}")
        prev_hash, tenant = rec["this_hash"], rec["tenantId"]
    return len(records)


def parse_jsonl(text: str) -> list[dict]:
    return [loads_strict(line) for line in text.splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# Self-test: RFC 8785's own examples. Collected by pytest through test_receipts_verifier.py.
# ---------------------------------------------------------------------------------------------

# RFC 8785 Appendix B: IEEE 754 bit pattern -> ECMAScript string.
_RFC8785_NUMBERS = [
    ("0000000000000000", "0"), ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"), ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"), ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"), ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"), ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"), ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"), ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"), ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"), ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"), ("43143ff3c1cb0959", "1424953923781206.2"),
]


def test_jcs_rfc8785_examples():
    import struct

    import pytest

    for bits, expected in _RFC8785_NUMBERS:
        x = struct.unpack(">d", bytes.fromhex(bits))[0]
        assert jcs_number(x) == expected, bits
    for bits in ("7fffffffffffffff", "7ff0000000000000"):  # NaN, Infinity are errors
        with pytest.raises(ValueError):
            jcs_number(struct.unpack(">d", bytes.fromhex(bits))[0])
    # Values receipts actually carry.
    assert [jcs_number(x) for x in (5.85e-06, 1e21, 0.0, 1, 42, 1.5, 0.1, 1e-7)] == \
        ["0.00000585", "1e+21", "0", "1", "42", "1.5", "0.1", "1e-7"]

    # RFC 8785 §3.2.2: the sample object, parsed then canonicalized.
    sample = json.loads(r'''{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}''')
    assert jcs(sample) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    ).encode()
    # RFC 8785 §3.2.3: UTF-16 code-unit order puts the emoji (D83D...) before U+FB33.
    names = ["\u20ac", "\r", "\ufb33", "1", "\U0001F600", "\u0080", "\u00f6"]
    order = [k for k in loads_strict(jcs({n: 0 for n in names}).decode())]
    assert order == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001F600", "\ufb33"]
    with pytest.raises(UnicodeEncodeError):
        jcs("\ud800")  # lone surrogate


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python receipt_verifier.py export.jsonl keys.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        records = parse_jsonl(f.read())
    with open(argv[2], encoding="utf-8") as f:
        keys = load_key_registry(loads_strict(f.read()))
    try:
        n = verify_export(records, keys)
    except ReceiptError as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    print(f"OK {n} receipts: JCS hashes, Ed25519 signatures under {len(keys)} registry key(s), "
          f"chain links from seq 1 with no gap")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
