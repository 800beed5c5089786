"""Independent verifier for Tollgate attestations, inclusion proofs and evidence bundles, written
from docs/receipts.md §3–§4 alone (RFC 6962 / RFC 9162 Merkle trees over SHA-256, the signed tree
head, the bundle's chain from its anchor). Receipts themselves are checked with
receipt_verifier.py (§1–§2). No code is shared with the server.

    python evidence_verifier.py bundle.json [trusted-keys.json]

Exit status 0 only if every check holds.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature

from receipt_verifier import ReceiptError, jcs, load_key_registry, verify_receipt

ALGORITHM = "RFC6962-SHA256"
BUNDLE_FORMAT = "tollgate-evidence-bundle/v1"


class EvidenceError(Exception):
    """A check of §3 or §4 failed."""


# ---------------------------------------------------------------------------------------------
# RFC 6962 §2.1 / RFC 9162 §2.1.1: the Merkle Tree Hash
# ---------------------------------------------------------------------------------------------

def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def mth(leaf_data: list[bytes]) -> bytes:
    """MTH(D[n]) by its recursive definition: split at the largest power of two < n."""
    n = len(leaf_data)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaf_hash(leaf_data[0])
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(mth(leaf_data[:k]), mth(leaf_data[k:]))


def verify_inclusion(leaf_data: bytes, index: int, tree_size: int, proof: list[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2, step by step."""
    if index >= tree_size:
        return False
    fn, sn = index, tree_size - 1
    r = leaf_hash(leaf_data)
    for p in proof:
        if sn == 0:
            return False  # the path is longer than the tree is deep
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def unhex32(text, what: str) -> bytes:
    if not isinstance(text, str) or len(text) != 64 or text != text.lower():
        raise EvidenceError(f"{what}: expected 64 lowercase hex digits, got {text!r}")
    return bytes.fromhex(text)


# ---------------------------------------------------------------------------------------------
# §3: the signed tree head
# ---------------------------------------------------------------------------------------------

def verify_tree_head(tenant_id: str, from_seq: int, to_seq: int, leaf_count: int, root_hex: str,
                     key_id: str, signature_b64: str, keys) -> None:
    if key_id not in keys:
        raise EvidenceError(f"tree head signed by unknown key {key_id!r}")
    signed = jcs({"tenantId": tenant_id, "fromSeq": from_seq, "toSeq": to_seq,
                  "leafCount": leaf_count, "root": root_hex})
    try:
        keys[key_id].verify(base64.b64decode(signature_b64, validate=True), signed)
    except (InvalidSignature, ValueError):
        raise EvidenceError("the signed tree head does not verify") from None


def verify_attestation_root(attestation: dict, receipts_in_period: list[dict], keys) -> bytes:
    """The attestation's root over the receipts of its period (ascending seq, leaf = raw thisHash)
    and its signed tree head. Returns the root."""
    period, merkle = attestation["period"], attestation["merkle"]
    if merkle["algorithm"] != ALGORITHM:
        raise EvidenceError(f"merkle.algorithm is {merkle['algorithm']!r}")
    seqs = [r["seq"] for r in receipts_in_period]
    if seqs != list(range(period["fromSeq"], period["toSeq"] + 1)):
        raise EvidenceError(f"receipts do not cover seq {period['fromSeq']}..{period['toSeq']} exactly")
    leaves = [unhex32(r.get("thisHash", r.get("this_hash")), f"seq {r['seq']} thisHash") for r in receipts_in_period]
    root = mth(leaves)
    if merkle["leafCount"] != len(leaves) or merkle["root"] != root.hex():
        raise EvidenceError(f"merkle root {merkle['root']} / {merkle['leafCount']} leaves != recomputed "
                            f"{root.hex()} / {len(leaves)}")
    anchor = attestation["anchor"]
    if anchor["root"] != root.hex():
        raise EvidenceError("anchor.root differs from merkle.root")
    verify_tree_head(attestation["tenantId"], period["fromSeq"], period["toSeq"], len(leaves), root.hex(),
                     anchor["keyId"], anchor["signature"], keys)
    return root


def verify_inclusion_proof(doc: dict, attestation: dict, keys) -> None:
    """An inclusion proof response checked against a signed tree head (never against its own
    root alone: §3)."""
    root = unhex32(attestation["merkle"]["root"], "attestation root")
    tree_size = attestation["merkle"]["leafCount"]
    if doc["treeSize"] != tree_size or doc["root"] != root.hex():
        raise EvidenceError("proof is for another tree than the attested one")
    if doc["algorithm"] != ALGORITHM:
        raise EvidenceError(f"algorithm {doc['algorithm']!r}")
    proof = [unhex32(h, "proof hash") for h in doc["proof"]]
    if doc["index"] != doc["seq"] - attestation["period"]["fromSeq"]:
        raise EvidenceError("index is not the receipt's position in the period")
    if not verify_inclusion(unhex32(doc["thisHash"], "thisHash"), doc["index"], tree_size, proof, root):
        raise EvidenceError(f"inclusion proof for seq {doc['seq']} does not verify")


# ---------------------------------------------------------------------------------------------
# §4: the evidence bundle
# ---------------------------------------------------------------------------------------------

def verify_bundle(bundle: dict, trusted_keys: dict | None = None) -> int:
    """Every check of §4; returns the number of receipts. `trusted_keys` pins the keys (else the
    bundle's own signingKeys are used)."""
    if bundle.get("format") != BUNDLE_FORMAT:
        raise EvidenceError(f"format {bundle.get('format')!r}")
    keys = trusted_keys if trusted_keys is not None else load_key_registry({"keys": bundle["signingKeys"]})
    period, anchor, receipts = bundle["period"], bundle["anchor"], bundle["receipts"]
    if anchor["seq"] != period["fromSeq"] - 1:
        raise EvidenceError("anchor.seq is not fromSeq - 1")
    prev, expected = anchor["thisHash"], period["fromSeq"]
    for r in receipts:
        if r["seq"] != expected:
            raise EvidenceError(f"seq {expected}: missing (next receipt is seq {r['seq']})")
        if r["tenantId"] != bundle["tenantId"]:
            raise EvidenceError(f"seq {r['seq']}: another tenant's receipt")
        if r["prevHash"] != prev:
            raise EvidenceError(f"seq {r['seq']}: prevHash does not link to the previous thisHash")
        try:
            verify_receipt(r, r["thisHash"], r["signature"], r["keyId"], keys)
        except ReceiptError as e:
            raise EvidenceError(str(e)) from None
        prev, expected = r["thisHash"], expected + 1
    if expected != period["toSeq"] + 1:
        raise EvidenceError(f"seq {expected}: missing (the period ends at {period['toSeq']})")
    attestation = bundle["attestation"]
    if (attestation["tenantId"], attestation["period"]["fromSeq"], attestation["period"]["toSeq"]) != \
            (bundle["tenantId"], period["fromSeq"], period["toSeq"]):
        raise EvidenceError("the attestation is for another tenant or period")
    root = verify_attestation_root(attestation, receipts, keys)
    if bundle["merkle"]["root"] != root.hex() or bundle["merkle"]["leafCount"] != len(receipts):
        raise EvidenceError("bundle merkle differs from the recomputed root")
    return len(receipts)


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        bundle = json.load(f)
    trusted = None
    if len(argv) == 3:
        with open(argv[2], encoding="utf-8") as f:
            trusted = load_key_registry(json.load(f))
    try:
        n = verify_bundle(bundle, trusted)
    except (EvidenceError, KeyError, TypeError) as e:
        print(f"FAIL: {e}")
        return 1
    print(f"OK: {n} receipts, chain from the anchor, signatures, Merkle root and signed tree head")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
