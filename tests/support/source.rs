//! Reading this crate's own source in tests (tests/layers.rs, tests/provider_folders.rs).

/// The text without items marked `#[cfg(test)]` (up to their `;` or closing brace).
pub fn drop_test_items(s: &str) -> String {
    let mut s = s.to_string();
    while let Some(at) = s.find("#[cfg(test)]") {
        let b = s.as_bytes();
        let mut i = at + "#[cfg(test)]".len();
        while i < b.len() && b[i] != b'{' && b[i] != b';' {
            i += 1;
        }
        if i < b.len() && b[i] == b'{' {
            let mut depth = 0;
            while i < b.len() {
                match b[i] {
                    b'{' => depth += 1,
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        s.replace_range(at..(i + 1).min(s.len()), "");
    }
    s
}
