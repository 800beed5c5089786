//! Built-in detectors for PII and secrets. A regex proposes candidates; a validator (checksum,
//! numbering rules, what the neighbouring characters are) keeps only the real ones, because a
//! gateway that redacts innocent numbers is unusable.
//!
//! Boundaries are checked on bytes: positions are char boundaries, and a byte >= 0x80 belongs to
//! a non-ASCII character, which is never an ASCII word character. So `日本4111…` is a boundary
//! and `x4111…` is not.

use std::sync::LazyLock;

use regex::Regex;

use super::luhn_iban::{iban_length, iban_valid, luhn_valid};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Builtin {
    Email,
    Phone,
    CreditCard,
    Iban,
    Ssn,
    Secret,
}

const EMAIL: &str =
    r"[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}@(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.){1,8}[A-Za-z]{2,24}";

/// International (`+<cc> …`), North American (`(555) 123-4567`, `555-123-4567`, `1-800-…`) and
/// trunk-prefix national numbers (`020 7946 0958`, `06 12 34 56 78`). Separators are required
/// outside the international form, so a plain integer is never a phone number.
const PHONE: &str = concat!(
    r"\+[1-9][0-9]{0,3}(?:[ .\-]?(?:\([0-9]{1,4}\)|[0-9]{1,5})){1,7}",
    r"|(?:1[ .\-])?(?:\([2-9][0-9]{2}\) ?|[2-9][0-9]{2}[ .\-])[0-9]{3}[ .\-][0-9]{4}",
    r"|0[1-9][0-9]{0,3}(?:[ \-][0-9]{2,8}){1,4}",
);

/// Prefilter only: at least 13 digits with optional single separators.
const CARD_PREFILTER: &str = r"[0-9](?:[ \-]?[0-9]){12}";
/// Maximal runs of digit groups; card numbers are carved out of a run by `cards`.
const NUM_RUN: &str = r"[0-9]+(?:[ \-][0-9]+)*";

const IBAN: &str = r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}";

const SSN: &str = r"[0-9]{3}-[0-9]{2}-[0-9]{4}";

const SECRET: &str = concat!(
    r"(?-u:\b)sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}",
    r"|(?-u:\b)tollgate_sk_[A-Za-z0-9_\-]{16,}",
    r"|(?-u:\b)(?:AKIA|ASIA)[0-9A-Z]{16}(?-u:\b)",
    r"|(?-u:\b)gh[pousr]_[A-Za-z0-9]{36,}",
    r"|(?-u:\b)github_pat_[A-Za-z0-9_]{22,}",
    r"|(?-u:\b)xox[baprs]-[A-Za-z0-9\-]{10,}",
    r"|(?-u:\b)AIza[0-9A-Za-z_\-]{35}",
    r"|(?-u:\b)(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{16,}",
    r"|(?-u:\b)eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{8,}",
    r"|(?-u:\b)(?i-u:bearer)[ \t]+[A-Za-z0-9\-._~+/]{20,}=*",
    // A whole PEM block; without its END line (a truncated paste, or a stream still arriving)
    // the header and the base64 lines that follow it (legacy encrypted keys: with their
    // `Proc-Type:`/`DEK-Info:` lines and the blank line after them).
    r"|-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----",
    r"(?:[\s\S]*?-----END[A-Z0-9 ]*PRIVATE KEY-----",
    r"|(?:\r?\n(?:Proc-Type:[^\r\n]*|DEK-Info:[^\r\n]*(?:\r?\n)?|[A-Za-z0-9+/=]+))*)",
);

static EMAIL_RE: LazyLock<Regex> = LazyLock::new(|| builtin_regex(EMAIL));
static PHONE_RE: LazyLock<Regex> = LazyLock::new(|| builtin_regex(PHONE));
static NUM_RUN_RE: LazyLock<Regex> = LazyLock::new(|| builtin_regex(NUM_RUN));
static IBAN_RE: LazyLock<Regex> = LazyLock::new(|| builtin_regex(IBAN));
static SSN_RE: LazyLock<Regex> = LazyLock::new(|| builtin_regex(SSN));
static SECRET_RE: LazyLock<Regex> = LazyLock::new(|| builtin_regex(SECRET));

/// Built-in patterns are constants checked by the tests; failing to compile one is a bug.
pub(crate) fn builtin_regex(pattern: &str) -> Regex {
    Regex::new(pattern).expect("built-in guardrail pattern")
}

impl Builtin {
    /// In the order of `PiiDoc`'s fields.
    pub(crate) const ALL: [Builtin; 6] =
        [Builtin::Email, Builtin::Phone, Builtin::CreditCard, Builtin::Iban, Builtin::Ssn, Builtin::Secret];

    pub(crate) fn category(self) -> &'static str {
        match self {
            Builtin::Email => "email",
            Builtin::Phone => "phone",
            Builtin::CreditCard => "credit_card",
            Builtin::Iban => "iban",
            Builtin::Ssn => "ssn",
            Builtin::Secret => "secret",
        }
    }

    /// A pattern that matches somewhere whenever `scan` could find something (for the
    /// `RegexSet` that skips detectors with nothing to do).
    pub(crate) fn prefilter(self) -> &'static str {
        match self {
            Builtin::Email => EMAIL,
            Builtin::Phone => PHONE,
            Builtin::CreditCard => CARD_PREFILTER,
            Builtin::Iban => IBAN,
            Builtin::Ssn => SSN,
            Builtin::Secret => SECRET,
        }
    }

    /// Reports every validated match starting at or after `from` (text before `from` is only
    /// context for the boundary checks).
    pub(crate) fn scan(self, text: &str, from: usize, out: &mut dyn FnMut(usize, usize)) {
        match self {
            Builtin::Email => validated(&EMAIL_RE, text, from, out, email),
            Builtin::Phone => validated(&PHONE_RE, text, from, out, phone),
            Builtin::CreditCard => cards(text, from, out),
            Builtin::Iban => validated(&IBAN_RE, text, from, out, iban),
            Builtin::Ssn => validated(&SSN_RE, text, from, out, ssn),
            Builtin::Secret => validated(&SECRET_RE, text, from, out, secret),
        }
    }
}

/// Runs `re` from `from`; `check` confirms (and may narrow) each match. A rejected match is
/// retried one character later, so a valid match inside a rejected one is still found.
pub(crate) fn validated(
    re: &Regex,
    text: &str,
    from: usize,
    out: &mut dyn FnMut(usize, usize),
    check: fn(&str, usize, usize) -> Option<(usize, usize)>,
) {
    let mut pos = from;
    while pos <= text.len() {
        let Some(m) = re.find_at(text, pos) else { return };
        let hit = if m.start() < m.end() { check(text, m.start(), m.end()) } else { None };
        match hit {
            Some((s, e)) => {
                out(s, e);
                pos = e;
            }
            None => pos = next_char(text, m.start()),
        }
    }
}

pub(crate) fn next_char(text: &str, i: usize) -> usize {
    i + text[i..].chars().next().map_or(1, char::len_utf8)
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The match may start at `s`: no word character before it, and no `glue` character that
/// joins it to a preceding number (`3.4111…` is a decimal, `12-555-…` a longer identifier).
fn left_ok(t: &[u8], s: usize, glue: &[u8]) -> bool {
    match s.checked_sub(1).map(|i| t[i]) {
        None => true,
        Some(b) if is_word(b) => false,
        Some(b) if glue.contains(&b) => !s.checked_sub(2).is_some_and(|i| t[i].is_ascii_digit()),
        Some(_) => true,
    }
}

/// The match may end at `e`: the mirror of `left_ok`.
fn right_ok(t: &[u8], e: usize, glue: &[u8]) -> bool {
    match t.get(e) {
        None => true,
        Some(&b) if is_word(b) => false,
        Some(b) if glue.contains(b) => !t.get(e + 1).is_some_and(u8::is_ascii_digit),
        Some(_) => true,
    }
}

/// The digit run around `s` (digits, spaces, hyphens) starts glued to a letter, as in
/// `DE88 3704 0044 0532 0130 00` or `ABC12 0532 0130 00`: it is one alphanumeric identifier
/// (an IBAN with a wrong check digit, a reference), not a card or phone number inside it.
fn run_glued_to_word(t: &[u8], s: usize) -> bool {
    let mut i = s;
    while i > 0 && s - i < 64 && (t[i - 1].is_ascii_digit() || t[i - 1] == b' ' || t[i - 1] == b'-') {
        i -= 1;
    }
    i > 0 && t[i - 1].is_ascii_alphabetic() && t.get(i).is_some_and(u8::is_ascii_digit)
}

fn email(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let t = text.as_bytes();
    let ends_clean = !t.get(e).is_some_and(|&b| is_word(b) || b == b'-' || b == b'@');
    ends_clean.then_some((s, e))
}

fn phone(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let t = text.as_bytes();
    if run_glued_to_word(t, s) {
        return None;
    }
    let m = &t[s..e];
    let digits = |m: &[u8]| m.iter().filter(|b| b.is_ascii_digit()).count();
    match m[0] {
        b'+' => {
            if !left_ok(t, s, b".-/") {
                return None;
            }
            // Greedy groups may have taken a following number ("+44 20 7946 0958 2024"): try
            // the candidate ends from the longest down.
            let mut end = e;
            loop {
                let n = digits(&t[s..end]);
                if (9..=15).contains(&n) && right_ok(t, end, b".-/") {
                    return Some((s, end));
                }
                if n < 9 {
                    return None;
                }
                let cut = t[s..end].iter().rposition(|&b| b == b' ')?;
                end = s + cut;
            }
        }
        b'0' => {
            // Trunk-prefix national numbers: one separator style throughout, 10 or 11 digits.
            let mut seps = m.iter().filter(|b| !b.is_ascii_digit());
            let first = seps.next().copied();
            let consistent = seps.all(|&b| Some(b) == first);
            let ok = consistent
                && (10..=11).contains(&digits(m))
                && t.get(s.wrapping_sub(1)) != Some(&b'+')
                && left_ok(t, s, b".-/")
                && right_ok(t, e, b".-/");
            ok.then_some((s, e))
        }
        _ => {
            let ok = s.checked_sub(1).map(|i| t[i]) != Some(b'+') && left_ok(t, s, b".-/") && right_ok(t, e, b".-/");
            ok.then_some((s, e))
        }
    }
}

fn ssn(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let t = text.as_bytes();
    let (area, group, serial) = (&t[s..s + 3], &t[s + 4..s + 6], &t[s + 7..s + 11]);
    // SSA rules: area never 000, 666 or 9xx; group never 00; serial never 0000.
    let ok = area != b"000"
        && area != b"666"
        && area[0] != b'9'
        && group != b"00"
        && serial != b"0000"
        && left_ok(t, s, b"-")
        && right_ok(t, e, b"-");
    ok.then_some((s, e))
}

fn iban(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let t = text.as_bytes();
    if !left_ok(t, s, b"") {
        return None;
    }
    // The greedy regex may have run into the following word: the country's length says
    // where the IBAN ends.
    let len = iban_length(&t[s..s + 2])?;
    let mut compact = [0u8; 34];
    let (mut n, mut i) = (0, s);
    while i < e && n < len {
        if t[i] != b' ' {
            compact[n] = t[i];
            n += 1;
        }
        i += 1;
    }
    let ok = n == len && !t.get(i).is_some_and(|&b| is_word(b)) && iban_valid(&compact[..n]);
    ok.then_some((s, i))
}

fn secret(text: &str, s: usize, e: usize) -> Option<(usize, usize)> {
    let m = &text[s..e];
    if let Some(body) = m.strip_prefix("sk-") {
        // `sk-learn-compatible-interface` is prose; real keys are random.
        return looks_random(body).then_some((s, e));
    }
    if m.len() > 6 && m.as_bytes()[..6].eq_ignore_ascii_case(b"bearer") {
        // The scheme is part of the match: a stream scanner that emitted "Bearer " could not
        // find the token after it any more.
        let tok = m[6..].trim_start_matches([' ', '\t']);
        return looks_random(tok).then_some((s, e));
    }
    Some((s, e))
}

fn looks_random(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().any(u8::is_ascii_digit) || (b.iter().any(u8::is_ascii_uppercase) && b.iter().any(u8::is_ascii_lowercase))
}

/// Card numbers inside runs of digit groups: 13–19 digits, contiguous or grouped like a card
/// (4-4-4-4…, Amex 4-6-5, Diners 4-6-4) with one separator style, Luhn-valid, not one
/// repeated digit. A group range inside a longer run is taken only at space separators, so a
/// hyphenated identifier is never cut into a card.
fn cards(text: &str, from: usize, out: &mut dyn FnMut(usize, usize)) {
    let t = text.as_bytes();
    let mut pos = from;
    let mut groups: Vec<(usize, usize)> = Vec::new();
    while pos <= text.len() {
        let Some(m) = NUM_RUN_RE.find_at(text, pos) else { return };
        pos = m.end().max(pos + 1);
        if m.end() - m.start() < 13 || run_glued_to_word(t, m.start()) {
            continue;
        }
        groups.clear();
        let mut i = m.start();
        while i < m.end() {
            let g = i;
            while i < m.end() && t[i].is_ascii_digit() {
                i += 1;
            }
            groups.push((g, i));
            i += 1;
        }
        let mut a = 0;
        while a < groups.len() {
            let mut best = None;
            let mut digits = 0;
            for b in a..groups.len() {
                digits += groups[b].1 - groups[b].0;
                if digits > 19 {
                    break;
                }
                if digits >= 13 && card_ok(t, &groups[a..=b], a == 0, b + 1 == groups.len()) {
                    best = Some(b);
                }
            }
            match best {
                Some(b) => {
                    out(groups[a].0, groups[b].1);
                    a = b + 1;
                }
                None => a += 1,
            }
        }
    }
}

fn card_ok(t: &[u8], gs: &[(usize, usize)], run_start: bool, run_end: bool) -> bool {
    let (s, e) = (gs[0].0, gs[gs.len() - 1].1);
    let left = if run_start { left_ok(t, s, b".") } else { t[s - 1] == b' ' };
    let right = if run_end { right_ok(t, e, b".") } else { t[e] == b' ' };
    if !left || !right {
        return false;
    }
    if gs.len() > 1 {
        let sep = t[gs[0].1];
        if gs[1..gs.len() - 1].iter().any(|g| t[g.1] != sep) {
            return false;
        }
        let len = |g: &(usize, usize)| g.1 - g.0;
        let last = len(&gs[gs.len() - 1]);
        let fours = len(&gs[0]) == 4 && gs[1..gs.len() - 1].iter().all(|g| len(g) == 4) && (1..=4).contains(&last);
        let amex_diners = gs.len() == 3 && len(&gs[0]) == 4 && len(&gs[1]) == 6 && (4..=5).contains(&last);
        if !fours && !amex_diners {
            return false;
        }
    }
    let mut digits = [0u8; 19];
    let mut n = 0;
    for &b in &t[s..e] {
        if b.is_ascii_digit() {
            digits[n] = b;
            n += 1;
        }
    }
    let digits = &digits[..n];
    digits.iter().any(|&d| d != digits[0]) && luhn_valid(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(b: Builtin, text: &str) -> Vec<&str> {
        let mut v = Vec::new();
        b.scan(text, 0, &mut |s, e| v.push((s, e)));
        v.into_iter().map(|(s, e)| &text[s..e]).collect()
    }

    #[test]
    fn builtin_patterns_compile() {
        for b in Builtin::ALL {
            builtin_regex(b.prefilter());
        }
        builtin_regex(NUM_RUN);
    }

    #[test]
    fn emails() {
        assert_eq!(found(Builtin::Email, "mail jane.doe+x@mail.example.co.uk."), ["jane.doe+x@mail.example.co.uk"]);
        assert_eq!(found(Builtin::Email, "到 a_b@corp.io 了"), ["a_b@corp.io"]);
        assert!(found(Builtin::Email, "user@localhost and @handle and a@b.c").is_empty());
        assert!(found(Builtin::Email, "name@example.com2x").is_empty());
    }

    #[test]
    fn phones_and_what_is_not_a_phone() {
        assert_eq!(found(Builtin::Phone, "call (555) 123-4567 now"), ["(555) 123-4567"]);
        assert_eq!(found(Builtin::Phone, "call 555-123-4567."), ["555-123-4567"]);
        assert_eq!(found(Builtin::Phone, "London +44 20 7946 0958, ok"), ["+44 20 7946 0958"]);
        assert_eq!(found(Builtin::Phone, "tel:+4915112345678"), ["+4915112345678"]);
        assert_eq!(found(Builtin::Phone, "+44 20 7946 0958 2024 plans"), ["+44 20 7946 0958"]);
        assert_eq!(found(Builtin::Phone, "1-800-555-1234"), ["1-800-555-1234"]);
        assert_eq!(found(Builtin::Phone, "Tel 020 7946 0958"), ["020 7946 0958"]);
        for not in [
            "on 2024-01-15 at 10:30",
            "version 1.2.3 and v10.15.7",
            "id 12345678901234",
            "4111 1111 1111 1111",
            "ref 12-555-123-4567",
            "+12 points",
            "2024-01-15T10:00:00+01:00",
            "05-01-2024 10",
            "0123456789",
            "DE88 3704 0044 0532 0130 00",
            "ref ABC12 0532 0130 00",
        ] {
            assert!(found(Builtin::Phone, not).is_empty(), "{not}: {:?}", found(Builtin::Phone, not));
        }
    }

    #[test]
    fn cards_need_luhn_and_card_grouping() {
        assert_eq!(found(Builtin::CreditCard, "card 4111 1111 1111 1111 exp"), ["4111 1111 1111 1111"]);
        assert_eq!(found(Builtin::CreditCard, "4111-1111-1111-1111"), ["4111-1111-1111-1111"]);
        assert_eq!(found(Builtin::CreditCard, "amex 3782 822463 10005"), ["3782 822463 10005"]);
        assert_eq!(found(Builtin::CreditCard, "x:5500000000000004;"), ["5500000000000004"]);
        assert_eq!(found(Builtin::CreditCard, "2024-01-15 4111 1111 1111 1111 2025"), ["4111 1111 1111 1111"]);
        assert_eq!(found(Builtin::CreditCard, "🎉4111111111111111🎉"), ["4111111111111111"]);
        for not in [
            "4111 1111 1111 1112",
            "1234567812345678",
            "0000 0000 0000 0000",
            "order A4111111111111111",
            "41111111111111111111111",
            "3.4111111111111111",
            "4111 1111-1111 1111",
            "41 1111 1111 1111 11",
            "9999-4111-1111-1111-1111",
            "DE88 4111 1111 1111 1111",
        ] {
            assert!(found(Builtin::CreditCard, not).is_empty(), "{not}");
        }
    }

    #[test]
    fn ibans_need_country_length_and_checksum() {
        assert_eq!(found(Builtin::Iban, "IBAN: DE89 3704 0044 0532 0130 00 thanks"), ["DE89 3704 0044 0532 0130 00"]);
        assert_eq!(found(Builtin::Iban, "GB82WEST12345698765432"), ["GB82WEST12345698765432"]);
        assert_eq!(
            found(Builtin::Iban, "FR14 2004 1010 0505 0001 3M02 606 AND"),
            ["FR14 2004 1010 0505 0001 3M02 606"]
        );
        for not in
            ["DE88 3704 0044 0532 0130 00", "XDE89370400440532013000", "DE89370400440532013000X", "US12345678901234567"]
        {
            assert!(found(Builtin::Iban, not).is_empty(), "{not}");
        }
    }

    #[test]
    fn ssns_follow_the_ssa_rules() {
        assert_eq!(found(Builtin::Ssn, "ssn 123-45-6789."), ["123-45-6789"]);
        for not in
            ["000-12-3456", "666-12-3456", "912-34-5678", "123-00-4567", "123-45-0000", "1123-45-6789", "123-45-67890"]
        {
            assert!(found(Builtin::Ssn, not).is_empty(), "{not}");
        }
    }

    #[test]
    fn secrets() {
        let cases = [
            "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
            "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_-Q",
            "sk-ant-api03-Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fE",
            "tollgate_sk_4Fq8ZkT2mN7pX1rB9sD3vH6jL0wY5cE",
            "AKIAIOSFODNN7EXAMPLE",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_11ABCDEFG0abcdefghijklmnopqrstuvwxyz",
            "xoxb-123456789012-abcdefghij",
            "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
            "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "rk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ];
        for c in cases {
            assert_eq!(found(Builtin::Secret, &format!("key「{c}」 end")), [c], "{c}");
        }
        assert_eq!(
            found(Builtin::Secret, "Authorization: Bearer abc123DEF456ghi789JKL012mno"),
            ["Bearer abc123DEF456ghi789JKL012mno"]
        );
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1x\nabcd==\n-----END RSA PRIVATE KEY-----";
        assert_eq!(found(Builtin::Secret, &format!("here:\n{pem}\nthanks")), [pem]);
        let cut = "-----BEGIN PRIVATE KEY-----\nMIIEowIBAAKCAQEA1x\nabcd";
        assert_eq!(found(Builtin::Secret, &format!("{cut}\n\nsorry, truncated")), [cut]);
        let legacy = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0A1B\n\nMIIEowIB";
        assert_eq!(found(Builtin::Secret, &format!("{legacy}\n\nthat's it")), [legacy]);
        for not in [
            "sk-learn-compatible-interface",
            "task-abcdefghijklmnopqrstuvwxyz012345",
            "Bearer token-authentication-explained",
        ] {
            assert!(found(Builtin::Secret, not).is_empty(), "{not}");
        }
    }
}
