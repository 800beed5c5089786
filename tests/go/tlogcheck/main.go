// tlogcheck: the tenant log (docs/log.md) checked with Go's reference packages,
// golang.org/x/mod/sumdb/note and golang.org/x/mod/sumdb/tlog, as an outside auditor would.
//
//	tlogcheck <management base URL> <key> [<old size> <old root, base64>]
//
// It verifies the checkpoint with the log's active verifier key (note.Open), rebuilds the root
// from the C2SP tiles through tlog.TileHashReader (which authenticates every tile against the
// checkpoint), checks the first leaf's entry, an inclusion proof (tlog.CheckRecord), and, given an
// older checkpoint, the server's consistency proof (tlog.CheckTree) and that it equals the one
// tlog.ProveTree computes from the tiles. It prints `size <N> root <base64>` and exits 0, or
// names the first failure and exits 1.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

var base, key string

func get(path string) []byte {
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fail("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		fail("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return body
}

func fail(format string, args ...interface{}) {
	fmt.Printf("FAIL "+format+"\n", args...)
	os.Exit(1)
}

// C2SP tlog-tiles paths: no height, `entries` for the data tiles.
func tilePath(level string, n int64, w int) string {
	parts := []string{fmt.Sprintf("%03d", n%1000)}
	for n >= 1000 {
		n /= 1000
		parts = append([]string{fmt.Sprintf("x%03d", n%1000)}, parts...)
	}
	p := "/v1/log/tile/" + level + "/" + strings.Join(parts, "/")
	if w < 256 {
		p += fmt.Sprintf(".p/%d", w)
	}
	return p
}

type tiles struct{}

func (tiles) Height() int { return 8 }
func (tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		out[i] = get(tilePath(strconv.Itoa(t.L), t.N, t.W))
	}
	return out, nil
}
func (tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func hashes(list []string) []tlog.Hash {
	out := make([]tlog.Hash, len(list))
	for i, s := range list {
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != 32 {
			fail("proof hash %q", s)
		}
		copy(out[i][:], b)
	}
	return out
}

func main() {
	if len(os.Args) != 3 && len(os.Args) != 5 {
		fail("usage: tlogcheck URL KEY [OLD_SIZE OLD_ROOT]")
	}
	base, key = strings.TrimRight(os.Args[1], "/"), os.Args[2]

	var keys struct {
		Keys []struct {
			VerifierKey string `json:"verifierKey"`
			Active      bool   `json:"active"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(get("/v1/log/verifier-keys"), &keys); err != nil {
		fail("verifier keys: %v", err)
	}
	var verifiers []note.Verifier
	for _, k := range keys.Keys {
		v, err := note.NewVerifier(k.VerifierKey)
		if err != nil {
			fail("verifier key %q: %v", k.VerifierKey, err)
		}
		verifiers = append(verifiers, v)
	}
	msg := get("/v1/log/checkpoint")
	n, err := note.Open(msg, note.VerifierList(verifiers...))
	if err != nil {
		fail("note.Open: %v", err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || len(lines) != 4 || lines[3] != "" {
		fail("checkpoint body %q", n.Text)
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		fail("checkpoint root: %v", err)
	}
	fmt.Printf("ok note.Open: %s size %d, signed by %s\n", lines[0], size, n.Sigs[0].Name)

	thr := tlog.TileHashReader(tlog.Tree{N: size, Hash: root}, tiles{})
	got, err := tlog.TreeHash(size, thr)
	if err != nil || got != root {
		fail("tlog.TreeHash over the tiles: %v %v", got, err)
	}
	fmt.Println("ok tlog.TreeHash over the authenticated tiles equals the checkpoint's root")

	if size > 0 {
		entries := get(tilePath("entries", 0, int(min(size, 256))))
		leaf0 := tlog.RecordHash(entries[2:34])
		h, err := thr.ReadHashes([]int64{tlog.StoredHashIndex(0, 0)})
		if err != nil || entries[0] != 0 || entries[1] != 32 || h[0] != leaf0 {
			fail("entry 0 does not hash to leaf 0: %v", err)
		}
		seq := size
		var inc struct {
			LeafHash string   `json:"leafHash"`
			Proof    []string `json:"proof"`
		}
		if err := json.Unmarshal(get(fmt.Sprintf("/v1/log/inclusion?seq=%d&size=%d", seq, size)), &inc); err != nil {
			fail("inclusion: %v", err)
		}
		leaf := hashes([]string{inc.LeafHash})[0]
		if err := tlog.CheckRecord(hashes(inc.Proof), size, root, seq-1, leaf); err != nil {
			fail("tlog.CheckRecord of seq %d: %v", seq, err)
		}
		fmt.Printf("ok tlog.CheckRecord: seq %d is in the tree\n", seq)
	}

	if len(os.Args) == 5 {
		oldSize, _ := strconv.ParseInt(os.Args[3], 10, 64)
		raw, err := base64.StdEncoding.DecodeString(os.Args[4])
		if err != nil || len(raw) != 32 {
			fail("old root %q", os.Args[4])
		}
		var oldRoot tlog.Hash
		copy(oldRoot[:], raw)
		var c struct {
			Proof []string `json:"proof"`
		}
		if err := json.Unmarshal(get(fmt.Sprintf("/v1/log/consistency?from=%d&to=%d", oldSize, size)), &c); err != nil {
			fail("consistency: %v", err)
		}
		proof := hashes(c.Proof)
		if err := tlog.CheckTree(proof, size, root, oldSize, oldRoot); err != nil {
			fail("tlog.CheckTree %d -> %d: %v", oldSize, size, err)
		}
		own, err := tlog.ProveTree(size, oldSize, thr)
		if err != nil || len(own) != len(proof) {
			fail("tlog.ProveTree: %v", err)
		}
		for i := range own {
			if !bytes.Equal(own[i][:], proof[i][:]) {
				fail("the server's consistency proof differs from tlog.ProveTree's at %d", i)
			}
		}
		fmt.Printf("ok tlog.CheckTree: size %d is an extension of size %d\n", size, oldSize)
	}
	fmt.Printf("size %d root %s\n", size, base64.StdEncoding.EncodeToString(root[:]))
}

func min(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}
