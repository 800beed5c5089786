"""Attestation roots, inclusion proofs and evidence bundles checked by evidence_verifier.py, an
outside verifier built from docs/receipts.md alone; tampered bundles must fail it and
`tollgate verify` both."""

from __future__ import annotations

import copy
import json
import os
import subprocess

import pytest

from evidence_verifier import (
    EvidenceError, mth, verify_attestation_root, verify_bundle, verify_inclusion,
    verify_inclusion_proof,
)
from receipt_verifier import load_key_registry
from test_receipts_verifier import poll, request

# transparency-dev/merkle testonly/constants.go: leaf inputs and the roots of sizes 1..8.
LEAF_INPUTS = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]
ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def test_merkle_against_published_roots():
    leaves = [bytes.fromhex(x) for x in LEAF_INPUTS]
    for n in range(1, 9):
        assert mth(leaves[:n]).hex() == ROOTS[n - 1], n
    # RFC 6962 §2.1.1: PATH(2, D[3]) = [MTH(D[0:2])].
    d = leaves[:3]
    proof = [mth([d[0], d[1]])]
    assert proof[0] == bytes.fromhex(ROOTS[1])
    assert verify_inclusion(d[2], 2, 3, proof, mth(d))
    assert not verify_inclusion(d[2], 3, 3, proof, mth(d)), "index >= treeSize"
    assert not verify_inclusion(d[2], 2, 3, proof + [proof[0]], mth(d)), "a path longer than the tree"


def get_json(gateway, path):
    status, _, text = request("GET", gateway.mgmt_url + path, gateway.key)
    assert status == 200, f"{path}: {status} {text}"
    return json.loads(text)


@pytest.fixture(scope="module")
def period(gateway):
    """A management write (an `admin` receipt, with its signed `subject`) and a few fresh
    receipts, then the period seq 1..head (everything this tenant has)."""
    status, _, text = request("POST", gateway.mgmt_url + "/v1/keys", gateway.key, {"label": "evidence-admin"})
    assert status == 201, text
    ids = []
    for i in range(5):
        status, hdrs, text = request("POST", gateway.gateway_url + "/v1/chat/completions", gateway.key,
                                     {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"hi {i}"}]})
        assert status == 200, text
        ids.append(hdrs["x-tollgate-receipt-id"])

    def all_written():
        seqs = []
        for rid in ids:
            status, _, text = request("GET", f"{gateway.mgmt_url}/v1/receipts/{rid}", gateway.key)
            if status != 200:
                return None
            seqs.append(json.loads(text)["seq"])
        return seqs

    seqs = poll(all_written, "the new receipts")
    return {"fromSeq": 1, "toSeq": max(seqs), "ids": ids}


@pytest.fixture(scope="module")
def bundle(gateway, period):
    return get_json(gateway, f"/v1/compliance/evidence-bundle?fromSeq=1&toSeq={period['toSeq']}")


@pytest.fixture(scope="module")
def keys(gateway):
    return load_key_registry(get_json(gateway, "/v1/compliance/signing-keys"))


def test_bundle_verifies_offline(bundle, keys, period):
    admin = [r for r in bundle["receipts"] if r.get("model") == "keys.create"]
    assert admin and all(r["provider"] == "tollgate" and len(r["subject"]) == 36 for r in admin), admin
    assert verify_bundle(bundle) == period["toSeq"]
    assert verify_bundle(bundle, trusted_keys=keys) == period["toSeq"]


def test_attestation_root_and_inclusion_proofs(gateway, bundle, keys, period):
    q = f"fromSeq=1&toSeq={period['toSeq']}"
    attestation = get_json(gateway, f"/v1/compliance/attestation?{q}")
    root = verify_attestation_root(attestation, bundle["receipts"], keys)
    assert attestation["totals"]["chainVerified"] is True and attestation["totals"]["signaturesVerified"] is True
    totals = attestation["totals"]
    assert totals["adminEvents"] >= 1 and totals["receipts"] + totals["adminEvents"] == period["toSeq"], totals
    assert bundle["merkle"]["root"] == root.hex()
    for rid in [bundle["receipts"][0]["receiptId"], *period["ids"]]:
        proof = get_json(gateway, f"/v1/compliance/attestation/receipts/{rid}/inclusion?{q}")
        verify_inclusion_proof(proof, attestation, keys)
        assert proof["verified"] is True

        bent = copy.deepcopy(proof)
        if bent["proof"]:
            h = bent["proof"][0]
            bent["proof"][0] = ("0" if h[0] != "0" else "1") + h[1:]
            with pytest.raises(EvidenceError):
                verify_inclusion_proof(bent, attestation, keys)


def run_tollgate_verify(tmp_path, doc) -> subprocess.CompletedProcess:
    path = tmp_path / "bundle.json"
    path.write_text(json.dumps(doc))
    return subprocess.run([os.environ["TOLLGATE_BIN"], "verify", str(path)], capture_output=True, text=True,
                          timeout=60)


def _alter_receipt(b):
    b["receipts"][1]["promptTokens"] += 1


def _remove_receipt(b):
    del b["receipts"][1]


def _alter_root(b):
    b["merkle"]["root"] = "0" * 64


def _alter_tree_head(b):
    sig = b["attestation"]["anchor"]["signature"]
    b["attestation"]["anchor"]["signature"] = ("A" if sig[0] != "A" else "B") + sig[1:]


@pytest.mark.parametrize("tamper", [_alter_receipt, _remove_receipt, _alter_root, _alter_tree_head])
def test_tampered_bundles_fail_both_verifiers(bundle, tmp_path, tamper):
    assert run_tollgate_verify(tmp_path, bundle).returncode == 0
    bad = copy.deepcopy(bundle)
    tamper(bad)
    with pytest.raises(EvidenceError):
        verify_bundle(bad)
    out = run_tollgate_verify(tmp_path, bad)
    assert out.returncode != 0, out.stdout
    assert "NOT verified" in out.stdout, out.stdout
