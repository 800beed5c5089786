//! The receipt journal's record format (segments `*.rec`, since session 50): a record is one
//! frame, `length` (u32, little-endian) and `crc` (CRC-32 of the payload, u32) then the payload:
//! the row's values, the guardrail events', the outbox rows', the attempts' and the spend key.
//! A value is a tag byte and its bytes: `0` null, `1` an integer (i64), `2` a real (f64 bits),
//! `3` a text (u32 length, UTF-8). Lists are a u32 count and their items (a request's guardrail
//! events have no bound).
//!
//! Why not the JSON lines of earlier versions (segments `*.jsonl`, still read at start): the
//! writer's JSON and the applier's parse of it were ~2 µs a receipt of the ~50 µs a request cost
//! with every check on (session 49's profile); the frame is a copy each way.

use std::cell::RefCell;
use std::sync::Arc;

use super::super::value::Value;
use super::Record;

const NULL: u8 = 0;
const INT: u8 = 1;
const REAL: u8 = 2;
const TEXT: u8 = 3;

/// A frame's header: its payload's length and CRC-32.
pub const HEADER: usize = 8;

/// Appends `record` to `out` as one frame.
pub fn encode(record: &Record, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    values(out, &record.row);
    for rows in [&record.events, &record.outbox, &record.attempts] {
        count(out, rows.len());
        for row in rows {
            values(out, row);
        }
    }
    text(out, &record.spend_key);
    let len = (out.len() - start - HEADER) as u32;
    let crc = crc32fast::hash(&out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
}

fn count(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn values(out: &mut Vec<u8>, values: &[Value]) {
    count(out, values.len());
    for v in values {
        match v {
            Value::Null => out.push(NULL),
            Value::Int(i) => {
                out.push(INT);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Value::Real(r) => {
                out.push(REAL);
                out.extend_from_slice(&r.to_bits().to_le_bytes());
            }
            Value::Text(_) | Value::Static(_) => {
                out.push(TEXT);
                text(out, v.as_text().unwrap_or_default());
            }
        }
    }
}

fn text(out: &mut Vec<u8>, s: &str) {
    count(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// What the start of a buffer holds.
#[derive(Debug)]
pub enum Frame {
    /// A whole frame's record, and the frame's length.
    Record(Record, usize),
    /// Nothing.
    End,
    /// A frame that runs past the end of the buffer, or whose payload does not match its CRC:
    /// a write cut short (the newest segment's last frame) or a damaged file.
    Cut,
    /// A whole frame whose payload is not a record.
    Bad(String),
}

/// The frame at the start of `buf`.
pub fn decode(buf: &[u8]) -> Frame {
    if buf.is_empty() {
        return Frame::End;
    }
    let mut header = Cursor(buf);
    let (Some(len), Some(crc)) = (header.count(), header.count()) else { return Frame::Cut };
    let Some(payload) = header.take(len) else { return Frame::Cut };
    if crc32fast::hash(payload) as usize != crc {
        return Frame::Cut;
    }
    match record(&mut Cursor(payload)) {
        Some(r) => Frame::Record(r, HEADER + len),
        None => Frame::Bad("a frame that is not a record".into()),
    }
}

impl Frame {
    /// A record whose shape is not the one the store writes as [`Frame::Bad`].
    pub fn well_formed(self) -> Frame {
        match self {
            Frame::Record(r, _) if !r.well_formed() => Frame::Bad("not a receipt".into()),
            f => f,
        }
    }
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    /// A u32: a count, a length or a CRC.
    fn count(&mut self) -> Option<usize> {
        self.take(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    fn text(&mut self) -> Option<Arc<str>> {
        let len = self.count()?;
        std::str::from_utf8(self.take(len)?).ok().map(Arc::from)
    }

    fn value(&mut self) -> Option<Value> {
        Some(match self.u8()? {
            NULL => Value::Null,
            INT => Value::Int(self.u64()? as i64),
            REAL => Value::Real(f64::from_bits(self.u64()?)),
            TEXT => Value::Text(self.text()?),
            _ => return None,
        })
    }

    /// A row of values, none of its texts remembered.
    fn values(&mut self) -> Option<Vec<Value>> {
        self.row(&mut [])
    }

    fn rows(&mut self) -> Option<Vec<Vec<Value>>> {
        self.list(Cursor::values)
    }

    /// A count and its items. (Allocated at once: `collect` into an `Option` grows the vector
    /// item by item.)
    fn list<T>(&mut self, item: impl Fn(&mut Self) -> Option<T>) -> Option<Vec<T>> {
        let n = self.count()?;
        let mut out = Vec::with_capacity(n.min(self.0.len()));
        for _ in 0..n {
            out.push(item(self)?);
        }
        Some(out)
    }
}

/// The payload's record; None when it is not one (or has bytes left over).
fn record(c: &mut Cursor<'_>) -> Option<Record> {
    LAST_TEXTS.with_borrow_mut(|last| {
        let row = c.row(&mut last[..MEMO_PLACES])?;
        let (events, outbox, attempts) = (c.rows()?, c.rows()?, c.rows()?);
        let spend_key = c.text_as(&mut last[MEMO_PLACES])?;
        c.0.is_empty().then_some(Record { row, events, outbox, attempts, spend_key })
    })
}

/// Places of a row whose last text is remembered: a receipt's columns; the slot after them is
/// the spend key's.
const MEMO_PLACES: usize = super::RECEIPT_COLUMNS.len();

thread_local! {
    /// The last text decoded at each place of a receipt's row, and the last spend key, on this
    /// thread (the applier's). Consecutive receipts repeat most of their texts (tenant, actor,
    /// key, provider, model, checks, status): a text equal to the one before shares its `Arc`
    /// instead of being checked as UTF-8, allocated, copied and later freed again (`Cursor::text`
    /// was 3.8 % of the applier's samples). Session 52, every check on, three alternated pairs:
    /// applier 24.1, 27.0, 24.2 → 22.8, 26.7, 24.2 µs a request (−0.6 on average, within the
    /// noise of a VM whose speed drifts).
    static LAST_TEXTS: RefCell<Vec<Option<Arc<str>>>> = RefCell::new(vec![None; MEMO_PLACES + 1]);
}

impl Cursor<'_> {
    /// A row of values; the texts at its first `last.len()` places are shared with the
    /// previous row's where equal (a receipt's row: [`MEMO_PLACES`] of them).
    fn row(&mut self, last: &mut [Option<Arc<str>>]) -> Option<Vec<Value>> {
        let n = self.count()?;
        let mut out = Vec::with_capacity(n.min(self.0.len()));
        let mut places = last.iter_mut();
        for _ in 0..n {
            let v = match places.next() {
                Some(slot) if self.0.first() == Some(&TEXT) => {
                    self.take(1)?;
                    Value::Text(self.text_as(slot)?)
                }
                _ => self.value()?,
            };
            out.push(v);
        }
        Some(out)
    }

    /// A text: `slot`'s when the bytes are the same, else a new one, then kept in `slot`.
    fn text_as(&mut self, slot: &mut Option<Arc<str>>) -> Option<Arc<str>> {
        let len = self.count()?;
        let bytes = self.take(len)?;
        if let Some(same) = slot.as_ref().filter(|t| t.as_bytes() == bytes) {
            return Some(same.clone());
        }
        let text: Arc<str> = Arc::from(std::str::from_utf8(bytes).ok()?);
        *slot = Some(text.clone());
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::receipts::RECEIPT_COLUMNS;

    /// A record with every kind of value, a guardrail event, an outbox row and an attempt.
    fn record() -> Record {
        let mut row: Vec<Value> = (0..RECEIPT_COLUMNS.len()).map(|i| Value::Int(i as i64 - 3)).collect();
        row[0] = Value::Text("tenant-ä \"q\"\n".into());
        row[1] = Value::Int(i64::MAX);
        row[2] = Value::Real(0.000_005_85);
        row[3] = Value::Static("static");
        row[4] = Value::Null;
        row[5] = Value::Text("".into());
        let event = vec![Value::Text("e".into()); crate::store::receipts::EVENT_VALUES];
        let outbox = vec![Value::Real(-1.5e300); crate::store::webhooks::OUTBOX_COLUMNS];
        let mut r = Record::new(row, vec![event.clone(), event], vec![outbox], "key-1".into());
        r.attempts = vec![vec![Value::Int(i64::MIN); crate::store::receipts::ATTEMPT_VALUES]];
        r
    }

    fn framed(r: &Record) -> Vec<u8> {
        let mut out = Vec::new();
        encode(r, &mut out);
        out
    }

    #[test]
    fn a_record_reads_back_from_its_frame_exactly() {
        let r = record();
        let mut two = framed(&r);
        let one = two.len();
        encode(&r, &mut two);
        let Frame::Record(back, len) = decode(&two) else { panic!("not a record") };
        assert_eq!(len, one);
        assert_eq!(back, r, "every value, the Static as its text, the real to the bit");
        assert!(matches!(decode(&two[len..]), Frame::Record(_, n) if n == one));
        assert!(matches!(decode(&two[2 * one..]), Frame::End));
    }

    /// Rows whose texts repeat, change, turn into other kinds of value and back, or are not
    /// UTF-8 between two that are: each reads back as it was written, and a text equal to the
    /// previous row's at its place is the same `Arc`.
    #[test]
    fn texts_remembered_from_the_previous_row_read_back_as_written() {
        let base = record();
        let mut rows = vec![base.clone(), base.clone()];
        let mut changed = base.clone();
        changed.row[0] = Value::Text("tenant-ä \"q\"\n!".into());
        changed.row[5] = Value::Int(7);
        changed.spend_key = "key-2".into();
        rows.extend([changed, base.clone(), base.clone()]);
        let mut shorter = base.clone();
        shorter.row[0] = Value::Text("tenant-ä".into());
        rows.extend([shorter, base.clone()]);
        let mut previous: Option<Record> = None;
        for (n, r) in rows.iter().enumerate() {
            let Frame::Record(back, _) = decode(&framed(r)) else { panic!("row {n} not a record") };
            assert_eq!(&back, r, "row {n}");
            if let Some(p) = &previous {
                for (i, (a, b)) in back.row.iter().zip(&p.row).enumerate() {
                    if let (Value::Text(a), Value::Text(b)) = (a, b) {
                        assert_eq!(Arc::ptr_eq(a, b), a == b, "row {n}, place {i}");
                    }
                }
                assert_eq!(Arc::ptr_eq(&back.spend_key, &p.spend_key), back.spend_key == p.spend_key);
            }
            previous = Some(back);
        }
        // A text that is not UTF-8 after a row that remembered a valid one is still refused.
        let mut bad = framed(&base);
        let at = bad.windows(6).position(|w| w == b"tenant").expect("the tenant's text");
        bad[at] = 0xff;
        let payload_crc = crc32fast::hash(&bad[HEADER..]);
        bad[4..HEADER].copy_from_slice(&payload_crc.to_le_bytes());
        assert!(matches!(decode(&bad), Frame::Bad(_)));
        assert!(matches!(decode(&framed(&base)), Frame::Record(back, _) if back == base));
    }

    /// More guardrail events than a u16 counts (a request's findings have no bound).
    #[test]
    fn a_record_with_seventy_thousand_events_reads_back() {
        let mut r = record();
        r.events = vec![vec![Value::Int(1); crate::store::receipts::EVENT_VALUES]; 70_000];
        let Frame::Record(back, _) = decode(&framed(&r)).well_formed() else { panic!("not a record") };
        assert_eq!(back.events.len(), 70_000);
        assert_eq!(back, r);
    }

    #[test]
    fn a_frame_cut_short_or_damaged_is_cut_and_a_payload_that_is_not_a_record_is_bad() {
        let bytes = framed(&record());
        for end in [1, HEADER - 1, HEADER, bytes.len() - 1] {
            assert!(matches!(decode(&bytes[..end]), Frame::Cut), "cut at {end}");
        }
        let mut damaged = bytes.clone();
        damaged[HEADER + 20] ^= 1;
        assert!(matches!(decode(&damaged), Frame::Cut), "a changed byte fails the CRC");
        // A whole frame whose payload has a byte too many, or an unknown tag.
        for payload in [[&bytes[HEADER..], &[0][..]].concat(), vec![1, 0, 0, 0, 9]] {
            let mut frame = (payload.len() as u32).to_le_bytes().to_vec();
            frame.extend(crc32fast::hash(&payload).to_le_bytes());
            frame.extend(&payload);
            assert!(matches!(decode(&frame), Frame::Bad(_)), "{payload:?}");
        }
        let mut short = record();
        short.row.pop();
        assert!(matches!(decode(&framed(&short)).well_formed(), Frame::Bad(_)), "a row a value short");
    }
}
