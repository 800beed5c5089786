//! Budget periods and the `key_spend.period` keys spend is booked under (the store books
//! spend under them too, so they stand apart from the book and the ledger).

use chrono::{DateTime, Datelike, TimeZone, Utc};

/// How long a budget's spend accumulates before it starts again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    /// Resets at the first instant of every UTC month.
    Monthly,
    /// Never resets.
    Total,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Monthly => "monthly",
            Period::Total => "total",
        }
    }

    pub fn parse(s: &str) -> Option<Period> {
        match s {
            "monthly" => Some(Period::Monthly),
            "total" => Some(Period::Total),
            _ => None,
        }
    }

    /// The `key_spend.period` value spend at `now` is booked under for this period.
    pub fn key(self, now: DateTime<Utc>) -> String {
        match self {
            Period::Monthly => month_key(now),
            Period::Total => TOTAL.to_string(),
        }
    }

    /// When the spend of this period starts again: the first instant of the next UTC month for
    /// monthly budgets, never for total ones.
    pub fn resets_at(self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Period::Total => None,
            Period::Monthly => {
                let (y, m) = if now.month() == 12 { (now.year() + 1, 1) } else { (now.year(), now.month() + 1) };
                Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).single()
            }
        }
    }
}

/// The period key of spend that never resets.
pub const TOTAL: &str = "total";

/// `YYYY-MM` of `now` in UTC: the period key of monthly spend.
pub fn month_key(now: DateTime<Utc>) -> String {
    use chrono::Datelike;
    // Runs three times for every request that costs money: written digit by digit (`format!`
    // was 0.7 % of the proxy threads' time with every check on, session 50; chrono's `format`
    // re-parses its pattern), into a string of its final size, from one conversion to the date
    // (callgrind, session 53, 2 000 answers with every check on: 290 → 154 instructions a
    // call; collected from a char iterator, the string grew twice and the instant was
    // converted twice).
    let date = now.date_naive();
    match date.year() {
        y @ 0..=9999 => {
            let (y, m) = (y as u32, date.month());
            let mut key = String::with_capacity(7);
            for d in [y / 1000, y / 100 % 10, y / 10 % 10, y % 10] {
                key.push(char::from(b'0' + d as u8));
            }
            key.push('-');
            key.push(char::from(b'0' + (m / 10) as u8));
            key.push(char::from(b'0' + (m % 10) as u8));
            key
        }
        _ => now.format("%Y-%m").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_keys_and_resets() {
        let t = Utc.with_ymd_and_hms(2025, 12, 31, 23, 59, 59).unwrap();
        assert_eq!(Period::Monthly.key(t), "2025-12");
        assert_eq!(Period::Total.key(t), "total");
        for (y, m, key) in [(2026, 1, "2026-01"), (999, 10, "0999-10"), (10_000, 3, "+10000-03"), (-1, 12, "-0001-12")]
        {
            let t = Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).unwrap();
            assert_eq!(month_key(t), key, "{y}-{m}");
            assert_eq!(month_key(t), t.format("%Y-%m").to_string(), "what chrono writes");
        }
        assert_eq!(Period::Monthly.resets_at(t), Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single());
        let t = Utc.with_ymd_and_hms(2025, 2, 1, 0, 0, 0).unwrap();
        assert_eq!(Period::Monthly.resets_at(t), Utc.with_ymd_and_hms(2025, 3, 1, 0, 0, 0).single());
        assert_eq!(Period::Total.resets_at(t), None);
        assert_eq!(Period::parse("monthly"), Some(Period::Monthly));
        assert_eq!(Period::parse("weekly"), None);
    }
}
