//! Receipt rows: the batched, chained append and the reads of the receipt API.

use foldhash::HashMap;
use std::ops::Range;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::{Backend, ChainPool, Store, StoreError};
use crate::receipts::canonical::{self, Check, Receipt, GENESIS};
use crate::receipts::Term;
use crate::receipts::{Draft, GuardEvent};

/// A stored receipt: the signed members plus chain fields and side channels.
#[derive(Debug, Clone)]
pub struct StoredReceipt {
    pub receipt: Receipt,
    pub this_hash: String,
    pub signature: String,
    pub key_id: String,
    pub kind: String,
    pub pack_version: String,
}

const COLUMNS: &str = "tenant_id, seq, receipt_id, v, request_id, actor, provider, model, prompt_tokens, \
     completion_tokens, cost_usd, checks, upstream_status, ts, prev_hash, this_hash, signature, key_id, kind, \
     receipt_pack_version";
/// Written with every receipt, never read back into a `StoredReceipt`.
const WRITE_ONLY_COLUMNS: &str = "check_names, cache_result, saved_tokens, saved_usd";
const RECEIPT_BINDS: usize = 24;

fn from_row(r: &AnyRow) -> Result<StoredReceipt, sqlx::Error> {
    let checks: String = r.try_get("checks")?;
    let checks: Vec<Check> =
        serde_json::from_str(&checks).map_err(|e| sqlx::Error::Decode(format!("checks column: {e}").into()))?;
    let n = |c: &str| -> Result<u64, sqlx::Error> { Ok(r.try_get::<i64, _>(c)?.max(0) as u64) };
    Ok(StoredReceipt {
        receipt: Receipt {
            v: n("v")? as u32,
            tenant_id: r.try_get("tenant_id")?,
            seq: n("seq")?,
            receipt_id: r.try_get("receipt_id")?,
            request_id: r.try_get("request_id")?,
            actor: r.try_get("actor")?,
            provider: r.try_get("provider")?,
            model: r.try_get("model")?,
            prompt_tokens: n("prompt_tokens")?,
            completion_tokens: n("completion_tokens")?,
            cost_usd: r.try_get("cost_usd")?,
            checks,
            upstream_status: Term::parse(&r.try_get::<String, _>("upstream_status")?),
            ts: r.try_get("ts")?,
            prev_hash: r.try_get("prev_hash")?,
        },
        this_hash: r.try_get("this_hash")?,
        signature: r.try_get("signature")?,
        key_id: r.try_get("key_id")?,
        kind: r.try_get("kind")?,
        pack_version: r.try_get("receipt_pack_version")?,
    })
}

/// Rows per multi-row INSERT (24 binds a row; SQLite allows 32 766 per statement). With
/// positional `?` binds on SQLite, larger statements keep paying off; see `benches/receipts.rs`.
const ROWS_PER_INSERT: usize = 128;

/// Statement sizes a batch is cut into: the largest first, then smaller ones for the rest.
/// Every distinct row count is a distinct statement to prepare and cache; cutting
/// `rows.chunks(128)` gave each batch's remainder its own size, so nearly every batch prepared
/// a new statement of up to 3 000 parameters and churned the connection's statement cache.
/// With these sizes there are four statements per table, prepared once per connection.
const INSERT_SIZES: [usize; 4] = [ROWS_PER_INSERT, 32, 8, 1];

/// Cuts `rows` into slices whose lengths are all in [`INSERT_SIZES`].
fn statement_chunks<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        let size = INSERT_SIZES.iter().copied().find(|&s| s <= rows.len())?;
        let (head, rest) = rows.split_at(size);
        rows = rest;
        Some(head)
    })
}

/// Appends a batch in one transaction: per tenant (in id order, so concurrent writers lock
/// heads in the same order), lock the chain head, assign `seq`/`prevHash`, seal, insert, move
/// the head. On PostgreSQL the head row is locked (`FOR UPDATE`) so several gateway processes
/// keep one gap-free chain per tenant. Returns how many receipts were written.
///
/// The drafts are shared, not consumed: a failed batch is retried from the same drafts.
pub async fn append_batch(
    store: &Store,
    drafts: impl Into<Arc<[Draft]>>,
    signer: Arc<crate::receipts::signer::Signer>,
) -> Result<usize, StoreError> {
    let drafts: Arc<[Draft]> = drafts.into();
    let chain = store.chain_pool();
    store
        .run(move |_, backend| async move {
            match chain {
                ChainPool::Sqlite(pool) => {
                    append_on::<sqlx::Sqlite>(&mut *pool.acquire().await?, backend, &drafts, &signer).await?
                }
                ChainPool::Postgres(pool) => {
                    append_on::<sqlx::Postgres>(&mut *pool.acquire().await?, backend, &drafts, &signer).await?
                }
            }
            Ok(drafts.len())
        })
        .await
}

/// One receipt ready to insert: its draft, place in the chain and seal.
struct Pending<'a> {
    draft: &'a Draft,
    seq: u64,
    /// Its canonical bytes within the batch's one buffer.
    canonical: Range<usize>,
    prev_hash: Arc<str>,
    this_hash: Arc<str>,
    signature: [u8; 64],
}

/// Column values shared by many receipts of a batch (tenant, model, checks...), made once and
/// bound by reference count.
#[derive(Default)]
struct Interned<'a> {
    borrowed: HashMap<&'a str, Arc<str>>,
    built: HashMap<String, Arc<str>>,
}

impl<'a> Interned<'a> {
    fn get(&mut self, s: &'a str) -> Arc<str> {
        self.borrowed.entry(s).or_insert_with(|| Arc::from(s)).clone()
    }

    /// The value of `bytes`, which are UTF-8 (written from strings).
    fn get_built(&mut self, bytes: &[u8]) -> Arc<str> {
        let s = std::str::from_utf8(bytes).unwrap_or_default();
        if let Some(v) = self.built.get(s) {
            return v.clone();
        }
        let v: Arc<str> = Arc::from(s);
        self.built.insert(s.to_string(), v.clone());
        v
    }
}

async fn append_on<DB>(
    conn: &mut DB::Connection,
    backend: Backend,
    drafts: &[Draft],
    signer: &crate::receipts::signer::Signer,
) -> Result<(), sqlx::Error>
where
    DB: sqlx::Database,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    Arc<str>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    String: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
    f64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'static str: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let begin: &'static str = match backend {
        Backend::Sqlite => "BEGIN IMMEDIATE",
        Backend::Postgres => "BEGIN",
    };
    let mut tx = sqlx::Connection::begin_with(conn, sqlx::AssertSqlSafe(begin.to_string())).await?;
    // Per tenant in id order; a stable sort keeps each tenant's drafts in queue order.
    let mut order: Vec<&Draft> = drafts.iter().collect();
    order.sort_by(|a, b| a.tenant_id.cmp(&b.tenant_id));
    let mut shared = Interned::default();
    let mut canonical = Vec::with_capacity(drafts.len() * 640);
    for group in order.chunk_by(|a, b| a.tenant_id == b.tenant_id) {
        let tenant = group[0].tenant_id.clone();
        sqlx::query::<DB>(
            "INSERT INTO chain_heads (tenant_id, seq, this_hash) VALUES ($1, 0, $2) ON CONFLICT (tenant_id) DO NOTHING",
        )
        .bind(tenant.clone())
        .bind(GENESIS)
        .execute(&mut *tx)
        .await?;
        let head_sql: &'static str = match backend {
            Backend::Postgres => "SELECT seq, this_hash FROM chain_heads WHERE tenant_id = $1 FOR UPDATE",
            Backend::Sqlite => "SELECT seq, this_hash FROM chain_heads WHERE tenant_id = $1",
        };
        let head = sqlx::query::<DB>(head_sql).bind(tenant.clone()).fetch_one(&mut *tx).await?;
        let mut seq = head.try_get::<i64, _>(0usize)? as u64;
        let mut prev: Arc<str> = Arc::from(head.try_get::<String, _>(1usize)?);

        canonical.clear();
        let mut rows = Vec::with_capacity(group.len());
        for &draft in group {
            seq += 1;
            let start = canonical.len();
            canonical::write_receipt(&draft.view(seq, &prev), &mut canonical);
            let mut hex = [0u8; 64];
            hex::encode_to_slice(Sha256::digest(&canonical[start..]), &mut hex).expect("32 bytes are 64 hex digits");
            let this_hash: Arc<str> = Arc::from(std::str::from_utf8(&hex).expect("hex is ASCII"));
            let prev_hash = std::mem::replace(&mut prev, this_hash.clone());
            rows.push(Pending {
                draft,
                seq,
                canonical: start..canonical.len(),
                prev_hash,
                this_hash,
                signature: [0; 64],
            });
        }
        canonical::for_each_parallel(&mut rows, |r| r.signature = signer.sign(&canonical[r.canonical.clone()]));

        for chunk in statement_chunks(&rows) {
            let sql = format!(
                "INSERT INTO receipts ({COLUMNS}, {WRITE_ONLY_COLUMNS}) VALUES {}",
                values_list(backend, chunk.len(), RECEIPT_BINDS)
            );
            let mut q = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql));
            let mut text = Vec::new();
            for r in chunk {
                let d = r.draft;
                text.clear();
                serde_json::to_writer(&mut text, &d.checks).expect("checks are plain strings");
                let checks = shared.get_built(&text);
                text.clear();
                for c in &d.checks {
                    text.push(b',');
                    text.extend_from_slice(c.name.as_str().as_bytes());
                }
                text.push(b',');
                let names = shared.get_built(&text);
                let mut b64 = [0u8; 88];
                B64.encode_slice(r.signature, &mut b64).expect("64 bytes are 88 base64 characters");
                q = q
                    .bind(tenant.clone())
                    .bind(r.seq as i64)
                    .bind(Arc::<str>::from(d.receipt_id.as_str()))
                    .bind(1i64)
                    .bind(Arc::<str>::from(d.request_id.as_str()))
                    .bind(d.actor.clone())
                    .bind(shared.get(&d.provider))
                    .bind(shared.get(&d.model))
                    .bind(d.prompt_tokens as i64)
                    .bind(d.completion_tokens as i64)
                    .bind(d.cost_usd)
                    .bind(checks)
                    .bind(shared.get(d.upstream_status.as_str()))
                    .bind(Arc::<str>::from(d.ts.as_str()))
                    .bind(r.prev_hash.clone())
                    .bind(r.this_hash.clone())
                    .bind(Arc::<str>::from(std::str::from_utf8(&b64).expect("base64 is ASCII")))
                    .bind(shared.get(&signer.key_id))
                    .bind(d.kind.as_str())
                    .bind(shared.get(&d.pack_version))
                    .bind(names)
                    .bind(d.cache.result)
                    .bind(d.cache.saved_tokens as i64)
                    .bind(d.cache.saved_usd);
            }
            q.execute(&mut *tx).await?;
        }

        let events: Vec<(&Draft, &GuardEvent)> =
            group.iter().flat_map(|&d| d.events.iter().map(move |e| (d, e))).collect();
        for chunk in statement_chunks(&events) {
            let sql = format!(
                "INSERT INTO guardrail_events (id, tenant_id, ts, receipt_id, actor, model, check_name, result, \
                 category, direction) VALUES {}",
                values_list(backend, chunk.len(), 10)
            );
            let mut q = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql));
            for (d, e) in chunk {
                q = q
                    .bind(uuid::Uuid::now_v7().to_string())
                    .bind(tenant.clone())
                    .bind(d.ts.clone())
                    .bind(d.receipt_id.clone())
                    .bind(d.actor.clone())
                    .bind(d.model.clone())
                    .bind("GUARDRAIL")
                    .bind(e.result)
                    .bind(e.category.clone())
                    .bind(e.direction);
            }
            q.execute(&mut *tx).await?;
        }

        // Spend moves with its receipts: all of it lands, or none of it.
        let mut spend = super::spend::Deltas::default();
        for d in group.iter().filter(|d| d.cost_usd != 0.0) {
            spend.add(&d.tenant_id, &d.key_id, crate::budget::TOTAL, d.cost_usd);
            spend.add(&d.tenant_id, &d.key_id, d.ts.get(..7).unwrap_or_default(), d.cost_usd);
        }
        super::spend::apply::<DB>(&mut tx, spend).await?;

        sqlx::query::<DB>("UPDATE chain_heads SET seq = $1, this_hash = $2 WHERE tenant_id = $3")
            .bind(seq as i64)
            .bind(prev)
            .bind(tenant)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// Filters of the list and export endpoints (all combine with AND).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub from_ts: Option<String>,
    pub to_ts: Option<String>,
    pub actor: Option<String>,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub check: Option<String>,
    pub upstream_status: Option<String>,
}

const FILTER_SQL: &str = "tenant_id = $1 \
     AND (CAST($2 AS TEXT) IS NULL OR ts >= $2) AND (CAST($3 AS TEXT) IS NULL OR ts <= $3) \
     AND (CAST($4 AS TEXT) IS NULL OR actor = $4) AND (CAST($5 AS TEXT) IS NULL OR provider = $5) \
     AND (CAST($6 AS TEXT) IS NULL OR model = $6) AND (CAST($7 AS TEXT) IS NULL OR check_names LIKE $7) \
     AND (CAST($8 AS TEXT) IS NULL OR upstream_status = $8)";

type AnyQuery<'q> = sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>;

/// Binds `$1`..`$8` of [`FILTER_SQL`].
fn bind_filter(q: AnyQuery<'_>, tenant_id: String, f: Filter) -> AnyQuery<'_> {
    let check = like_check(&f.check);
    q.bind(tenant_id)
        .bind(f.from_ts)
        .bind(f.to_ts)
        .bind(f.actor)
        .bind(f.provider)
        .bind(f.model)
        .bind(check)
        .bind(f.upstream_status)
}

fn like_check(name: &Option<String>) -> Option<String> {
    // `%` and `_` cannot occur in check names we write; strip them so a filter stays literal.
    name.as_ref().map(|n| format!("%,{},%", n.replace(['%', '_'], "")))
}

/// One page of a tenant's receipts by `seq`: descending below `before`, or ascending above `after`.
pub async fn page(
    store: &Store,
    tenant_id: &str,
    f: &Filter,
    before: Option<u64>,
    after: Option<u64>,
    limit: i64,
) -> Result<Vec<StoredReceipt>, StoreError> {
    let (t, f) = (tenant_id.to_string(), f.clone());
    store
        .run(move |pool, _| async move {
            let (bound, order) = match (before, after) {
                (Some(b), _) => (format!("AND seq < {b}"), "DESC"),
                (None, Some(a)) => (format!("AND seq > {a}"), "ASC"),
                (None, None) => (String::new(), "DESC"),
            };
            let sql =
                format!("SELECT {COLUMNS} FROM receipts WHERE {FILTER_SQL} {bound} ORDER BY seq {order} LIMIT $9");
            let rows = bind_filter(sqlx::query(sqlx::AssertSqlSafe(sql)), t, f).bind(limit).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// A page of the tenant's receipts (seq descending, below `before`) holding a check named any
/// of `names`: the receipts that prove a compliance control.
pub async fn page_with_any_check(
    store: &Store,
    tenant_id: &str,
    names: &[String],
    before: Option<u64>,
    limit: i64,
) -> Result<Vec<StoredReceipt>, StoreError> {
    let t = tenant_id.to_string();
    let likes: Vec<Option<String>> = names.iter().map(|n| like_check(&Some(n.clone()))).collect();
    store
        .run(move |pool, _| async move {
            let any = (0..likes.len()).map(|i| format!("check_names LIKE ${}", i + 2)).collect::<Vec<_>>().join(" OR ");
            let any = if any.is_empty() { "1 = 0".to_string() } else { any };
            let bound = before.map(|b| format!("AND seq < {b}")).unwrap_or_default();
            let sql = format!(
                "SELECT {COLUMNS} FROM receipts WHERE tenant_id = $1 AND ({any}) {bound} ORDER BY seq DESC LIMIT ${}",
                likes.len() + 2
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t);
            for l in likes {
                q = q.bind(l);
            }
            let rows = q.bind(limit).fetch_all(&pool).await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

pub async fn by_id(store: &Store, tenant_id: &str, receipt_id: &str) -> Result<Option<StoredReceipt>, StoreError> {
    let (t, id) = (tenant_id.to_string(), receipt_id.to_string());
    store
        .run(move |pool, _| async move {
            let sql = format!("SELECT {COLUMNS} FROM receipts WHERE tenant_id = $1 AND receipt_id = $2");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(id).fetch_optional(&pool).await?;
            Ok(row.as_ref().map(from_row).transpose()?)
        })
        .await
}

/// Receipts with `from <= seq <= to`, ascending, at most `limit` (for chain walks).
pub async fn seq_range(
    store: &Store,
    tenant_id: &str,
    from: u64,
    to: u64,
    limit: i64,
) -> Result<Vec<StoredReceipt>, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let sql = format!(
                "SELECT {COLUMNS} FROM receipts WHERE tenant_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq LIMIT $4"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(t)
                .bind(from as i64)
                .bind(to as i64)
                .bind(limit)
                .fetch_all(&pool)
                .await?;
            Ok(rows.iter().map(from_row).collect::<Result<_, _>>()?)
        })
        .await
}

/// The columns of a packed page, in order: numbers are written as their decimal text and a `;`,
/// text as its byte length, a `:` and the bytes, so no value needs escaping and none can be
/// mistaken for a separator. `cost_usd` travels as text that converts back to the same `f64`
/// (SQLite's `quote()` falls back to 20 digits when 15 do not round-trip; PostgreSQL prints the
/// shortest exact form), so every recomputed hash sees the stored value.
const PACKED: [(&str, Field); 19] = [
    ("seq", Field::Number),
    ("receipt_id", Field::Text),
    ("v", Field::Number),
    ("request_id", Field::Text),
    ("actor", Field::Text),
    ("provider", Field::Text),
    ("model", Field::Text),
    ("prompt_tokens", Field::Number),
    ("completion_tokens", Field::Number),
    ("cost_usd", Field::Number),
    ("checks", Field::Text),
    ("upstream_status", Field::Text),
    ("ts", Field::Text),
    ("prev_hash", Field::Text),
    ("this_hash", Field::Text),
    ("signature", Field::Text),
    ("key_id", Field::Text),
    ("kind", Field::Text),
    ("receipt_pack_version", Field::Text),
];

#[derive(Clone, Copy)]
enum Field {
    Number,
    Text,
}

/// The `concat(...)` arguments that pack one receipt.
fn packed_row(backend: Backend) -> String {
    let parts: Vec<String> = PACKED
        .iter()
        .map(|(col, kind)| match (kind, *col, backend) {
            (Field::Number, "cost_usd", Backend::Sqlite) => "quote(cost_usd), ';'".to_string(),
            (Field::Number, "cost_usd", Backend::Postgres) => "cost_usd::text, ';'".to_string(),
            (Field::Number, col, _) => format!("{col}, ';'"),
            (Field::Text, col, _) => format!("octet_length({col}), ':', {col}"),
        })
        .collect();
    parts.join(", ")
}

/// The rows of [`seq_range`] packed by the database into one text value (see `PACKED`): one
/// value back instead of one row per receipt. Per-row driver work (a channel hop between
/// threads, the Any conversion, a copy per column) was most of a chain walk's time. Decode with
/// [`unpack`], off the async runtime.
pub async fn seq_range_packed(
    store: &Store,
    tenant_id: &str,
    from: u64,
    to: u64,
    limit: i64,
) -> Result<String, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(move |pool, backend| async move {
            // The aggregate takes the ordered subquery's rows as they come (no ORDER BY inside
            // it: sorting a page again would spill megabytes to temporary files); `unpack`
            // sorts a page that is ever out of order.
            let page = "FROM (SELECT seq, receipt_id, v, request_id, actor, provider, model, prompt_tokens, \
                        completion_tokens, cost_usd, checks, upstream_status, ts, prev_hash, this_hash, signature, \
                        key_id, kind, receipt_pack_version FROM receipts WHERE tenant_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq \
                        LIMIT $4) AS r";
            let row = packed_row(backend);
            let sql = match backend {
                Backend::Sqlite => format!("SELECT group_concat(concat({row}), '') AS page {page}"),
                Backend::Postgres => format!("SELECT string_agg(concat({row}), '') AS page {page}"),
            };
            let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(t)
                .bind(from as i64)
                .bind(to as i64)
                .bind(limit)
                .fetch_one(&pool)
                .await?;
            Ok(row.try_get::<Option<String>, _>("page")?.unwrap_or_default())
        })
        .await
}

/// Reads a packed page value by value.
struct Unpacker<'a> {
    page: &'a str,
    at: usize,
}

impl<'a> Unpacker<'a> {
    fn bad(&self, what: &str) -> StoreError {
        StoreError::Other(format!("receipt page: {what} at byte {}", self.at))
    }

    fn number(&mut self) -> Result<&'a str, StoreError> {
        let rest = &self.page[self.at..];
        let end = rest.find(';').ok_or_else(|| self.bad("unterminated number"))?;
        self.at += end + 1;
        Ok(&rest[..end])
    }

    fn text(&mut self) -> Result<&'a str, StoreError> {
        let rest = &self.page[self.at..];
        let colon = rest.find(':').ok_or_else(|| self.bad("text without length"))?;
        let len: usize = rest[..colon].parse().map_err(|_| self.bad("bad text length"))?;
        let value = rest.get(colon + 1..colon + 1 + len).ok_or_else(|| self.bad("text past the end"))?;
        self.at += colon + 1 + len;
        Ok(value)
    }

    fn int(&mut self) -> Result<u64, StoreError> {
        let n = self.number()?;
        n.parse::<u64>().map_err(|_| self.bad("bad integer"))
    }
}

/// Decodes a page from [`seq_range_packed`] (CPU-bound: call it on a blocking thread).
pub fn unpack(tenant_id: &str, page: &str) -> Result<Vec<StoredReceipt>, StoreError> {
    let mut u = Unpacker { page, at: 0 };
    // A page holds few distinct check lists: parse each once.
    let mut lists: Vec<(&str, Vec<Check>)> = Vec::new();
    let mut out = Vec::new();
    while u.at < page.len() {
        let seq = u.int()?;
        let receipt_id = u.text()?.to_string();
        let v = u.int()? as u32;
        let request_id = u.text()?.to_string();
        let actor = u.text()?.to_string();
        let provider = u.text()?.to_string();
        let model = u.text()?.to_string();
        let prompt_tokens = u.int()?;
        let completion_tokens = u.int()?;
        let cost = u.number()?;
        let cost_usd: f64 = cost.trim().parse().map_err(|_| u.bad("bad cost_usd"))?;
        let checks_text = u.text()?;
        let checks = match lists.iter().find(|(t, _)| *t == checks_text) {
            Some((_, c)) => c.clone(),
            None => {
                let c: Vec<Check> = serde_json::from_str(checks_text)
                    .map_err(|e| StoreError::Other(format!("receipt page: checks column: {e}")))?;
                if lists.len() < 32 {
                    lists.push((checks_text, c.clone()));
                }
                c
            }
        };
        let receipt = Receipt {
            v,
            tenant_id: tenant_id.to_string(),
            seq,
            receipt_id,
            request_id,
            actor,
            provider,
            model,
            prompt_tokens,
            completion_tokens,
            cost_usd,
            checks,
            upstream_status: Term::parse(u.text()?),
            ts: u.text()?.to_string(),
            prev_hash: u.text()?.to_string(),
        };
        out.push(StoredReceipt {
            receipt,
            this_hash: u.text()?.to_string(),
            signature: u.text()?.to_string(),
            key_id: u.text()?.to_string(),
            kind: u.text()?.to_string(),
            pack_version: u.text()?.to_string(),
        });
    }
    if !out.is_sorted_by_key(|r| r.receipt.seq) {
        out.sort_by_key(|r| r.receipt.seq);
    }
    Ok(out)
}

/// The stored `this_hash` of one seq (the link into a range), if that receipt exists.
pub async fn hash_at(store: &Store, tenant_id: &str, seq: u64) -> Result<Option<String>, StoreError> {
    text_at(store, tenant_id, seq, "this_hash").await
}

/// One text column of the receipt at `seq`, if that receipt exists.
pub(super) async fn text_at(
    store: &Store,
    tenant_id: &str,
    seq: u64,
    column: &'static str,
) -> Result<Option<String>, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let sql = format!("SELECT {column} FROM receipts WHERE tenant_id = $1 AND seq = $2");
            let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(t).bind(seq as i64).fetch_optional(&pool).await?;
            Ok(row.map(|r| r.get::<String, _>(0)))
        })
        .await
}

pub async fn count_all(store: &Store) -> Result<i64, StoreError> {
    store
        .run(|pool, _| async move {
            let row = sqlx::query("SELECT COUNT(*) AS n FROM receipts").fetch_one(&pool).await?;
            Ok(row.try_get::<i64, _>("n")?)
        })
        .await
}

/// Every tenant's chain head `(tenant_id, seq)`.
pub async fn chain_heads(store: &Store) -> Result<Vec<(String, u64)>, StoreError> {
    store
        .run(|pool, _| async move {
            let rows =
                sqlx::query("SELECT tenant_id, seq FROM chain_heads ORDER BY tenant_id").fetch_all(&pool).await?;
            rows.iter()
                .map(|r| Ok((r.try_get::<String, _>("tenant_id")?, r.try_get::<i64, _>("seq")?.max(0) as u64)))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
        .await
}

/// The tenant's chain head `seq` (0 before its first receipt).
pub async fn head_seq(store: &Store, tenant_id: &str) -> Result<u64, StoreError> {
    let t = tenant_id.to_string();
    store
        .run(move |pool, _| async move {
            let row =
                sqlx::query("SELECT seq FROM chain_heads WHERE tenant_id = $1").bind(t).fetch_optional(&pool).await?;
            Ok(row.map(|r| r.get::<i64, _>("seq").max(0) as u64).unwrap_or(0))
        })
        .await
}

/// The `seq` of the `(n+1)`-th receipt matching `f` in ascending order, if there is one
/// (an export of `n` rows is truncated exactly when it exists).
pub async fn nth_seq(store: &Store, tenant_id: &str, f: &Filter, n: u64) -> Result<Option<u64>, StoreError> {
    let (t, f) = (tenant_id.to_string(), f.clone());
    store
        .run(move |pool, _| async move {
            let sql = format!("SELECT seq FROM receipts WHERE {FILTER_SQL} ORDER BY seq LIMIT 1 OFFSET $9");
            let row =
                bind_filter(sqlx::query(sqlx::AssertSqlSafe(sql)), t, f).bind(n as i64).fetch_optional(&pool).await?;
            Ok(row.map(|r| r.get::<i64, _>("seq") as u64))
        })
        .await
}

/// `(?,?,…),(?,?,…)` for `rows` rows of `per_row` binds: positional on SQLite (sqlx looks `$n`
/// up among all parameters, quadratic in the row count), numbered on PostgreSQL.
fn values_list(backend: Backend, rows: usize, per_row: usize) -> String {
    let mut sql = String::with_capacity(rows * per_row * 4);
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push('(');
        for k in 0..per_row {
            if k > 0 {
                sql.push(',');
            }
            match backend {
                Backend::Sqlite => sql.push('?'),
                Backend::Postgres => sql.push_str(&format!("${}", i * per_row + k + 1)),
            }
        }
        sql.push(')');
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_cut_into_the_few_cached_statement_sizes() {
        for n in 0..600usize {
            let rows: Vec<usize> = (0..n).collect();
            let chunks: Vec<&[usize]> = statement_chunks(&rows).collect();
            assert!(chunks.iter().all(|c| INSERT_SIZES.contains(&c.len())), "n={n}");
            assert_eq!(chunks.concat(), rows, "every row once, in order (n={n})");
        }
        let sizes: Vec<usize> = statement_chunks(&[0u8; 300]).map(<[u8]>::len).collect();
        assert_eq!(sizes, [128, 128, 32, 8, 1, 1, 1, 1]);
    }
}
