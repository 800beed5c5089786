use super::tile_path::{format, parse, TilePath};

fn p(s: &str) -> Option<TilePath> {
    parse(&s.split('/').collect::<Vec<_>>())
}

#[test]
fn tile_paths_as_c2sp_writes_them() {
    assert_eq!(p("0/x001/x234/067"), Some(TilePath { level: Some(0), index: 1_234_067, width: 256 }));
    assert_eq!(p("1/000.p/5"), Some(TilePath { level: Some(1), index: 0, width: 5 }));
    assert_eq!(p("entries/x001/000"), Some(TilePath { level: None, index: 1000, width: 256 }));
    assert_eq!(p("entries/042.p/255"), Some(TilePath { level: None, index: 42, width: 255 }));
    for bad in [
        "0/1",
        "0/0001",
        "0/x000/001",
        "0/001.p/0",
        "0/001.p/256",
        "0/001.p/07",
        "8/000",
        "x/000",
        "0",
        "0/01x",
        "0/x01/000",
    ] {
        assert_eq!(p(bad), None, "{bad}");
    }
    for t in [
        TilePath { level: Some(2), index: 0, width: 256 },
        TilePath { level: Some(0), index: 999, width: 3 },
        TilePath { level: None, index: 1_234_067, width: 256 },
    ] {
        assert_eq!(p(&format(t)), Some(t));
    }
    assert_eq!(format(TilePath { level: Some(0), index: 1_234_067, width: 256 }), "0/x001/x234/067");
}

mod proofs {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use tlog_tiles::tlog::{self, Hash, HashReader};

    use crate::receipts::merkle;
    use crate::store::{tiles, Store};
    use crate::tenant_log::tree;

    /// Go's `tlog` storage in memory: every stored hash by index.
    struct Memory(Mutex<HashMap<u64, Hash>>);

    impl HashReader for Memory {
        fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog::Error> {
            let m = self.0.lock().unwrap();
            Ok(indexes.iter().map(|i| m[i]).collect())
        }
    }

    fn memory_log(leaves: &[Vec<u8>]) -> Memory {
        let m = Memory(Mutex::new(HashMap::new()));
        for (n, data) in leaves.iter().enumerate() {
            let new = tlog::stored_hashes(n as u64, data, &m).unwrap();
            let start = tlog::stored_hash_count(n as u64);
            let mut map = m.0.lock().unwrap();
            for (k, h) in new.into_iter().enumerate() {
                map.insert(start + k as u64, h);
            }
        }
        m
    }

    fn hx(s: &str) -> [u8; 32] {
        merkle::from_hex(s).unwrap()
    }

    /// transparency-dev/merkle `proof/verify_test.go` (`consistencyProofs`), over the leaves of
    /// `testonly/constants.go` (`LeafInputs`): the crate's consistency proofs are RFC 9162's.
    #[test]
    fn published_consistency_proofs() {
        let inputs =
            ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"];
        let leaves: Vec<Vec<u8>> = inputs.iter().map(|s| hex::decode(s).unwrap()).collect();
        let m = memory_log(&leaves);
        let vectors: [(u64, u64, &[&str]); 4] = [
            (1, 1, &[]),
            (
                1,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                6,
                8,
                &[
                    "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
            (
                2,
                5,
                &[
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                ],
            ),
        ];
        for (from, to, expected) in vectors {
            let proof = tlog::prove_tree(to, from, &m).unwrap();
            let got: Vec<[u8; 32]> = proof.iter().map(|h| h.0).collect();
            let want: Vec<[u8; 32]> = expected.iter().map(|s| hx(s)).collect();
            assert_eq!(got, want, "consistency {from} -> {to}");
            let (a, b) = (tlog::tree_hash(from, &m).unwrap(), tlog::tree_hash(to, &m).unwrap());
            tlog::check_tree(&proof, to, b, from, a).unwrap();
        }
    }

    /// A tenant log of `n` synthetic receipts (only what the tree reads), its tiles built by
    /// `backfill` as for a database written before the tiles.
    pub(super) async fn synthetic(store: &Store, tenant: &str, n: u64) -> Vec<[u8; 32]> {
        let leaves: Vec<[u8; 32]> = (0..n).map(|i| merkle::leaf_hash(&i.to_be_bytes())).collect();
        let mut values = Vec::new();
        for (i, l) in leaves.iter().enumerate() {
            values.push(format!(
                "('{tenant}', {}, '{tenant}-{i}', 1, '', '', '', '', 0, 0, 0, '[]', '', 'ok', '', '', '{}', '', '')",
                i + 1,
                hex::encode(l)
            ));
        }
        let (t, seq) = (tenant.to_string(), n as i64);
        store
            .run(move |pool, _| async move {
                let mut tx = pool.begin().await?;
                for chunk in values.chunks(2000) {
                    let sql = format!(
                        "INSERT INTO receipts (tenant_id, seq, receipt_id, v, request_id, actor, provider, model, \
                         prompt_tokens, completion_tokens, cost_usd, checks, check_names, upstream_status, ts, \
                         prev_hash, this_hash, signature, key_id) VALUES {}",
                        chunk.join(",")
                    );
                    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut *tx).await?;
                }
                sqlx::query("INSERT INTO chain_heads (tenant_id, seq, this_hash) VALUES ($1, $2, '')")
                    .bind(t)
                    .bind(seq)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(())
            })
            .await
            .unwrap();
        assert!(tiles::backfill(store).await.unwrap() > 0);
        leaves
    }

    /// Roots, inclusion and consistency proofs read from the stored tiles, at sizes around the
    /// tile edges of levels 0 and 1, equal the reference tree (`receipts::merkle`, pinned to the
    /// published vectors) and verify.
    #[test]
    fn proofs_from_tiles_match_the_reference_tree() {
        let (store, dir) = crate::store::temp_sqlite("tenant-log");
        crate::store::db_runtime().block_on(async {
            let n = 65_536 + 300;
            let data = synthetic(&store, "t1", n).await;
            let hashes: Vec<merkle::Hash> = data.iter().map(|d| merkle::leaf_hash(d)).collect();
            let sizes = [1u64, 2, 255, 256, 257, 511, 512, 1000, 65_535, 65_536, 65_537, n];
            for &size in &sizes {
                let root = tree::root(&store, "t1", size).await.unwrap();
                assert_eq!(root, merkle::root(&hashes[..size as usize]), "root at {size}");
                for index in [0, size / 2, size - 1] {
                    let p = tree::inclusion(&store, "t1", size, index).await.unwrap();
                    assert_eq!(p.from_root, hashes[index as usize]);
                    assert_eq!(Some(p.path.clone()), merkle::inclusion_proof(&hashes[..size as usize], index as usize));
                    assert!(merkle::verify_inclusion(&p.from_root, index, size, &p.path, &root));
                }
            }
            for (from, to) in [(0, 5), (7, 7), (1, 256), (255, 257), (300, 65_537), (65_536, n), (1, n)] {
                let p = tree::consistency(&store, "t1", from, to).await.unwrap();
                assert_eq!(p.to_root, merkle::root(&hashes[..to as usize]));
                if from == 0 || from == to {
                    assert!(p.path.is_empty());
                    continue;
                }
                let proof: Vec<Hash> = p.path.iter().map(|h| Hash(*h)).collect();
                tlog::check_tree(&proof, to, Hash(p.to_root), from, Hash(p.from_root)).unwrap();
                let mut forged = proof.clone();
                forged[0].0[0] ^= 1;
                assert!(tlog::check_tree(&forged, to, Hash(p.to_root), from, Hash(p.from_root)).is_err());
            }
            // A tile the tree of that size has not filled is not there; a full one is.
            assert!(tree::tile_hashes(&store, "t1", 300, 0, 1, 256).await.unwrap().is_none());
            assert_eq!(tree::tile_hashes(&store, "t1", 300, 0, 1, 44).await.unwrap().unwrap().len(), 44 * 32);
            // Level 1 holds 257 hashes: tile 1/0 is full, 1/1 has one.
            assert_eq!(tree::tile_hashes(&store, "t1", n, 1, 0, 256).await.unwrap().unwrap().len(), 256 * 32);
            assert_eq!(tree::tile_hashes(&store, "t1", n, 1, 1, 1).await.unwrap().unwrap().len(), 32);
            assert!(tree::tile_hashes(&store, "t1", n, 1, 1, 2).await.unwrap().is_none());
            // The backfill made what the append paths make, and running it again adds nothing.
            assert_eq!(tiles::backfill(&store).await.unwrap(), 0);
            // A tile left out (a lost race at an upgrade) is made again at the next start.
            store
                .run(|pool, _| async move {
                    sqlx::query("DELETE FROM log_tiles WHERE level = 1").execute(&pool).await?;
                    Ok(())
                })
                .await
                .unwrap();
            assert_eq!(tiles::backfill(&store).await.unwrap(), 1, "level 1 made again; level 0 kept");
            assert_eq!(tree::root(&store, "t1", n).await.unwrap(), merkle::root(&hashes));
            store.close().await;
            let _ = std::fs::remove_dir_all(dir);
        });
    }
}

/// The kept right edge (`store::log_heads`, the fast path of `checkpoint::current`) against
/// the stored tiles (`tree::root`, `tree::edge`: the slow reference).
mod kept_edge {
    use std::sync::Arc;

    use crate::receipts::signer::Signer;
    use crate::store::log_heads::{Edge, KeptHead};
    use crate::store::receipts::tests::draft;
    use crate::store::{receipts as stored, Store};
    use crate::tenant_log::{checkpoint, tree};

    const PREFIX: &str = "kept-edge.example";

    /// An edge grown one leaf at a time has, at every size checked, the root and the subtree
    /// roots the tiles give: every size up to 520 (two level-0 tiles and change), then every
    /// 257th, and the sizes around the first level-1 tile.
    #[test]
    fn an_edge_grown_leaf_by_leaf_is_the_tiles_edge_at_every_size() {
        let (store, dir) = crate::store::temp_sqlite("kept-edge");
        crate::store::db_runtime().block_on(async {
            let n = 65_536 + 300;
            let data = super::proofs::synthetic(&store, "t1", n).await;
            let mut edge = Edge::empty();
            assert_eq!(edge.root(), tree::root(&store, "t1", 0).await.unwrap(), "the empty tree");
            for (i, leaf) in data.iter().enumerate() {
                edge.push(leaf);
                let size = i as u64 + 1;
                if size <= 520 || size.is_multiple_of(257) || (65_535..=65_537).contains(&size) || size == n {
                    assert_eq!(edge.root(), tree::root(&store, "t1", size).await.unwrap(), "root at {size}");
                    assert_eq!(edge, tree::edge(&store, "t1", size).await.unwrap(), "edge at {size}");
                }
            }
            store.close().await;
        });
        let _ = std::fs::remove_dir_all(dir);
    }

    /// `checkpoint::current` of `store` is the tenant's head, its root the tiles' root at that
    /// size, its note signed by `key`, and the edge kept for it the tiles' edge.
    async fn holds(store: &Store, key: &Signer, tenant: &str) -> u64 {
        let c = checkpoint::current(store, key, PREFIX, tenant).await.unwrap();
        let size = stored::head_seq(store, tenant).await.unwrap();
        assert_eq!(c.size, size, "the checkpoint covers every committed receipt");
        assert_eq!(c.root, hex::encode(tree::root(store, tenant, size).await.unwrap()), "root at {size}");
        let opened = checkpoint::open(&c.note, &[key.signing_key().verifying_key().to_bytes()]).unwrap();
        assert_eq!((opened.size(), opened.hash().0.to_vec()), (size, hex::decode(&c.root).unwrap()));
        let origin = checkpoint::origin(PREFIX, tenant);
        let kept = store.log_heads().get(tenant, &origin).expect("an edge is kept");
        assert_eq!(kept.edge, tree::edge(store, tenant, size).await.unwrap(), "kept edge at {size}");
        assert_eq!(kept.checkpoint, c);
        size
    }

    async fn append(store: &Store, signer: &Arc<Signer>, tenant: &str, from: usize, n: usize) {
        let drafts: Vec<_> = (from..from + n).map(|i| draft(tenant, i)).collect();
        crate::receipts::rows::append_batch(store, drafts, signer.clone()).await.unwrap();
    }

    /// Checkpoints made from the kept edge equal the tiles' at every size, while the log grows
    /// by 1 to `CATCH_UP + 1` receipts at a time (one more: the edge is read again), through
    /// two stores on one database (two instances: each extends its own edge by what the other
    /// appended), after a restart (a new store: no edge kept), and when the kept edge is not
    /// this log's (its last leaf differs: it is read again from the tiles).
    #[test]
    fn checkpoints_from_the_kept_edge_equal_the_tiles() {
        let (a, dir) = crate::store::temp_sqlite("kept-edge-two");
        let url = format!("sqlite://{}", dir.join("t.db").display());
        let signer = Arc::new(Signer::from_seed(&[7u8; 32]));
        crate::store::db_runtime().block_on(async {
            let b = Store::connect(&url).await.unwrap();
            assert_eq!(holds(&a, &signer, "t1").await, 0, "the empty log");
            let mut next = 0;
            let most = checkpoint::CATCH_UP as usize;
            for (k, grow) in [1, 1, 2, 251, 1, 255, 256, 257, 3, most, most + 1, 1, 40, 130].into_iter().enumerate() {
                let (writer, reader) = if k % 3 == 1 { (&b, &a) } else { (&a, &b) };
                append(writer, &signer, "t1", next, grow).await;
                next += grow;
                holds(writer, &signer, "t1").await;
                if k % 2 == 0 {
                    holds(reader, &signer, "t1").await;
                }
            }
            let restarted = Store::connect(&url).await.unwrap();
            assert_eq!(holds(&restarted, &signer, "t1").await, next as u64);
            append(&restarted, &signer, "t1", next, 5).await;
            next += 5;
            holds(&restarted, &signer, "t1").await;

            // An edge kept that is not this log's (a database put back from a copy, say): the
            // right size, other leaves. Its last leaf is not this log's, so it is not extended.
            holds(&a, &signer, "t1").await;
            let origin = checkpoint::origin(PREFIX, "t1");
            let kept = a.log_heads().get("t1", &origin).unwrap();
            let mut other = Edge::empty();
            for i in 0..kept.edge.size() {
                other.push(&[(i % 251) as u8; 32]);
            }
            a.log_heads().forget("t1");
            a.log_heads().put("t1", KeptHead { edge: other, ..kept });
            append(&a, &signer, "t1", next, 2).await;
            next += 2;
            assert_eq!(holds(&a, &signer, "t1").await, next as u64);
            for s in [&a, &b, &restarted] {
                s.close().await;
            }
        });
        let _ = std::fs::remove_dir_all(dir);
    }
}
