// Tollgate console: receipts, chains and proofs verified in the browser, with code the server
// does not run (docs/receipts.md, docs/log.md). Only WebCrypto is used: SHA-256 and Ed25519.
// The server hands over data (in a <script type="application/json"> block, or an export it
// streams); every verdict on this page is computed here.
"use strict";
(() => {
  const enc = new TextEncoder();

  const hex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  function unhex(h) {
    if (typeof h !== "string" || !/^(?:[0-9a-f]{2})*$/.test(h)) throw new Error("not lowercase hex: " + h);
    const out = new Uint8Array(h.length / 2);
    for (let i = 0; i < out.length; i++) out[i] = parseInt(h.substr(i * 2, 2), 16);
    return out;
  }
  const unb64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  const sha256 = async (bytes) => new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  function concat(...parts) {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    return out;
  }
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

  // RFC 8785 (JCS): object members sorted by their names' UTF-16 code units (what Array.sort
  // does by default), no whitespace, strings and numbers as ECMAScript's JSON.stringify writes
  // them (JCS defines its number form as exactly that).
  function jcs(v) {
    if (v === null || typeof v !== "object") {
      if (typeof v === "number" && !Number.isFinite(v)) throw new Error("JCS: a number that is not finite");
      return JSON.stringify(v);
    }
    if (Array.isArray(v)) return "[" + v.map(jcs).join(",") + "]";
    return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + jcs(v[k])).join(",") + "}";
  }

  const SIGNED = ["v", "tenantId", "seq", "receiptId", "requestId", "actor", "provider", "model",
    "promptTokens", "completionTokens", "costUsd", "checks", "upstreamStatus", "ts", "prevHash", "subject"];
  function signedOf(r) {
    const o = {};
    for (const n of SIGNED) if (Object.prototype.hasOwnProperty.call(r, n)) o[n] = r[n];
    return o;
  }

  // Ed25519 public keys of the signing-key registry, by keyId, each checked against its id
  // (keyId = first 16 hex of SHA-256 of the raw key).
  const imported = new Map();
  async function registryKey(registry, keyId) {
    if (imported.has(keyId)) return imported.get(keyId);
    const entry = (registry.keys || []).find((k) => k.keyId === keyId);
    if (!entry) throw new Error(`key ${keyId} is not in the signing-key registry`);
    const raw = unb64(entry.publicKey);
    if (hex(await sha256(raw)).slice(0, 16) !== keyId) throw new Error(`the registry's key ${keyId} does not hash to its id`);
    const key = await crypto.subtle.importKey("raw", raw, { name: "Ed25519" }, false, ["verify"]);
    imported.set(keyId, key);
    return key;
  }
  const ed25519 = (key, sig, msg) => crypto.subtle.verify({ name: "Ed25519" }, key, sig, msg);

  // RFC 9162 §2.1.3.2, in full: index < size, early exhaustion, sn = 0 at the end.
  async function inclusionRoot(index, size, leafHash, proof) {
    if (!(index < size)) throw new Error(`leaf index ${index} is not below the tree size ${size}`);
    let fn = index, sn = size - 1, r = leafHash;
    for (const p of proof) {
      if (sn === 0) throw new Error("the proof is longer than the tree allows");
      if (fn % 2 === 1 || fn === sn) {
        r = await sha256(concat([1], p, r));
        if (fn % 2 === 0) { while (fn % 2 === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); } }
      } else {
        r = await sha256(concat([1], r, p));
      }
      fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
    }
    if (sn !== 0) throw new Error("the proof is shorter than the tree needs");
    return r;
  }

  // RFC 6962 MTH over leaf data (each the 32 bytes of a thisHash).
  async function merkleRoot(leaves) {
    if (leaves.length === 0) return sha256(new Uint8Array(0));
    let level = await Promise.all(leaves.map((d) => sha256(concat([0], d))));
    return mth(level);
  }
  async function mth(hashes) {
    if (hashes.length === 1) return hashes[0];
    let k = 1;
    while (k * 2 < hashes.length) k *= 2;
    const [l, r] = await Promise.all([mth(hashes.slice(0, k)), mth(hashes.slice(k))]);
    return sha256(concat([1], l, r));
  }

  // A C2SP signed note: body (origin, size, root) and the signature line of `keyName`,
  // checked against the matching verifier key (`name+hash+base64(0x01 || key)`).
  async function verifyCheckpoint(note, verifierKeys) {
    const cut = note.indexOf("\n\n");
    if (cut < 0) throw new Error("the checkpoint has no signature block");
    const body = note.slice(0, cut + 1);
    const [origin, sizeText, rootB64] = body.split("\n");
    const size = Number(sizeText);
    const root = unb64(rootB64);
    if (!Number.isSafeInteger(size) || root.length !== 32) throw new Error("the checkpoint's size or root is malformed");
    for (const line of note.slice(cut + 2).split("\n")) {
      const m = /^\u2014 (\S+) (\S+)$/.exec(line);
      if (!m || m[1] !== origin) continue;
      const sig = unb64(m[2]);
      for (const vk of verifierKeys.keys || []) {
        // `name+hash+key`: the key's base64 may itself hold a `+`.
        const m2 = /^([^+]+)\+([0-9a-f]{8})\+(.+)$/.exec(vk.verifierKey);
        if (!m2) continue;
        const [, name, hash, keyB64] = m2;
        const key = unb64(keyB64);
        if (name !== origin || hash !== hex(sig.slice(0, 4)) || key[0] !== 1) continue;
        const pub = await crypto.subtle.importKey("raw", key.slice(1), { name: "Ed25519" }, false, ["verify"]);
        if (await ed25519(pub, sig.slice(4), enc.encode(body))) return { origin, size, root };
        throw new Error(`the checkpoint's signature by ${name} does not verify`);
      }
    }
    throw new Error(`no signature on the checkpoint by a verifier key of ${origin}`);
  }

  // ---- one receipt -------------------------------------------------------------------------
  function step(list, ok, text) {
    const li = document.createElement("li");
    li.className = ok ? "pass" : "fail";
    li.textContent = text;
    list.appendChild(li);
    return ok;
  }

  async function receiptPage(data) {
    const status = document.getElementById("verify-status");
    const steps = document.getElementById("verify-steps");
    const r = data.receipt;
    const failures = [];
    const check = (ok, good, bad) => { if (!step(steps, ok, ok ? good : bad)) failures.push(bad); return ok; };
    const canonical = jcs(signedOf(r));
    document.getElementById("canonical").textContent = canonical;
    const bytes = enc.encode(canonical);
    step(steps, true, `Canonical bytes computed (RFC 8785): ${bytes.length} bytes from ${Object.keys(signedOf(r)).length} signed members.`);
    const digest = await sha256(bytes);
    check(hex(digest) === r.thisHash, `SHA-256 of the canonical bytes equals thisHash ${r.thisHash}.`,
      `The receipt's contents do not match its hash: SHA-256 of the signed members is ${hex(digest)}, ` +
      `but thisHash is ${r.thisHash}. A signed member (tokens, cost, model, actor, checks…) was changed after signing.`);
    try {
      const key = await registryKey(data.keys, r.keyId);
      const ok = await ed25519(key, unb64(r.signature), bytes);
      check(ok, `Ed25519 signature verified with signing key ${r.keyId} from the registry.`,
        `The Ed25519 signature does not verify over these canonical bytes with signing key ${r.keyId}.`);
    } catch (e) { check(false, "", `The signature could not be checked: ${e.message}.`); }
    chainLinks(data, r, check);
    await proof(data, digest, check);
    status.className = failures.length ? "failed" : "verified";
    status.textContent = failures.length
      ? `Not verified: ${failures[0]}`
      : "Verified in this browser: hash, signature, chain links and inclusion in the signed checkpoint.";
  }

  function chainLinks(data, r, check) {
    if (data.prev) {
      check(data.prev.thisHash === r.prevHash, `prevHash equals the thisHash of receipt ${data.prev.seq}.`,
        `prevHash ${r.prevHash} is not the thisHash of the previous receipt (seq ${data.prev.seq}): ${data.prev.thisHash}.`);
    } else if (r.seq === 1) {
      check(r.prevHash === "0".repeat(64), "The first receipt's prevHash is 64 zeros.", "The first receipt's prevHash is not 64 zeros.");
    }
    if (data.next) {
      check(data.next.prevHash === r.thisHash, `The next receipt (seq ${data.next.seq}) links back to this one.`,
        `The next receipt (seq ${data.next.seq}) does not link back: its prevHash is ${data.next.prevHash}.`);
    }
  }

  async function proof(data, digest, check) {
    try {
      const cp = await verifyCheckpoint(data.checkpoint, data.verifierKeys);
      check(cp.origin.endsWith("/" + data.receipt.tenantId), `Checkpoint of ${cp.origin} (size ${cp.size}) signed by the log's key.`,
        `The checkpoint's origin ${cp.origin} is not this tenant's log.`);
      const inc = data.inclusion;
      if (!inc) { check(false, "", `The checkpoint (size ${cp.size}) does not yet cover seq ${data.receipt.seq}.`); return; }
      const leaf = await sha256(concat([0], digest));
      const root = await inclusionRoot(data.receipt.seq - 1, cp.size, leaf, inc.proof.map(unhex));
      check(same(root, cp.root), `Inclusion proof verified: leaf ${data.receipt.seq - 1} of ${cp.size} leads to the checkpoint's root.`,
        `The inclusion proof does not lead to the signed checkpoint's root: this receipt, as shown, is not the leaf the log holds at seq ${data.receipt.seq}.`);
    } catch (e) { check(false, "", `The log proof could not be checked: ${e.message}.`); }
  }

  // ---- a period's chain (Evidence) ---------------------------------------------------------
  async function lines(response, onLine) {
    const reader = response.body.getReader();
    const dec = new TextDecoder();
    let rest = "";
    for (;;) {
      const { done, value } = await reader.read();
      rest += dec.decode(value || new Uint8Array(0), { stream: !done });
      const parts = rest.split("\n");
      rest = parts.pop();
      for (const p of parts) if (p.trim()) await onLine(JSON.parse(p));
      if (done) break;
    }
    if (rest.trim()) await onLine(JSON.parse(rest));
  }

  async function chainOfPeriod(data) {
    const bar = document.getElementById("chain-progress");
    const out = document.getElementById("chain-status");
    const a = data.attestation;
    const from = a.period.fromSeq, to = a.period.toSeq, total = Math.max(0, to - from + 1);
    bar.max = Math.max(1, total); bar.value = 0;
    out.className = "pending";
    out.textContent = `Reading ${total} receipts…`;
    const started = performance.now();
    const q = new URLSearchParams(data.period);
    q.set("format", "jsonl"); q.set("limit", "50000");
    const res = await fetch("/console/evidence/export?" + q.toString(), { credentials: "same-origin" });
    if (!res.ok) throw new Error(`the export answered ${res.status}`);
    const leaves = [];
    let prev = null, batch = [];
    const flush = async () => {
      const hashes = await Promise.all(batch.map(async (r) => {
        const bytes = enc.encode(jcs(signedOf(r)));
        const d = await sha256(bytes);
        if (hex(d) !== r.this_hash) throw new Error(`seq ${r.seq}: the contents do not match thisHash`);
        const key = await registryKey(data.keys, r.key_id);
        if (!(await ed25519(key, unb64(r.signature), bytes))) throw new Error(`seq ${r.seq}: the signature does not verify`);
        return d;
      }));
      for (let i = 0; i < batch.length; i++) {
        const r = batch[i];
        if (prev && (r.seq !== prev.seq + 1 || r.prevHash !== prev.this_hash)) throw new Error(`seq ${r.seq}: the chain breaks (gap or prevHash mismatch)`);
        prev = r;
        leaves.push(hashes[i]);
      }
      bar.value = leaves.length;
      out.textContent = `${leaves.length} of ${total} receipts verified…`;
      batch = [];
    };
    await lines(res, async (r) => {
      if (r.seq < from || r.seq > to) return;
      batch.push(r);
      if (batch.length >= 500) await flush();
    });
    await flush();
    if (leaves.length !== total) throw new Error(`the export gave ${leaves.length} of the period's ${total} receipts`);
    const root = hex(await merkleRoot(leaves));
    if (root !== a.anchor.root) throw new Error(`the Merkle root of the receipts, ${root}, is not the attestation's signed root ${a.anchor.root}`);
    const head = { tenantId: a.tenantId, fromSeq: from, toSeq: to, leafCount: total, root };
    const key = await registryKey(data.keys, a.anchor.keyId);
    if (!(await ed25519(key, unb64(a.anchor.signature), enc.encode(jcs(head))))) throw new Error("the attestation's signed tree head does not verify");
    const secs = ((performance.now() - started) / 1000).toFixed(1);
    out.className = "verified";
    out.textContent = `Verified in this browser: ${total} receipts (seq ${from}–${to}), every hash, signature and link, and the signed root, in ${secs} s.`;
  }

  function start() {
    const one = document.getElementById("tg-data");
    if (one) {
      receiptPage(JSON.parse(one.textContent)).catch((e) => {
        const s = document.getElementById("verify-status");
        s.className = "failed"; s.textContent = `Not verified: ${e.message}`;
      });
    }
    const ev = document.getElementById("tg-evidence");
    const button = document.getElementById("verify-chain");
    if (ev && button) {
      const data = JSON.parse(ev.textContent);
      button.addEventListener("click", () => {
        button.disabled = true;
        chainOfPeriod(data).catch((e) => {
          const s = document.getElementById("chain-status");
          s.className = "failed"; s.textContent = `Not verified: ${e.message}.`;
        }).finally(() => { button.disabled = false; });
      });
    }
  }
  window.tollgateVerify = { jcs, inclusionRoot, merkleRoot };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
