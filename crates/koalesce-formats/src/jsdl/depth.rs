//! How deep a document's elements nest, found before the XML parser sees it: roxmltree
//! recurses once per level of elements, so a hostile document of a few thousand nested
//! elements would overflow the stack (aborting the whole process) instead of being refused.
//!
//! The scan may overcount (it is not an XML parser) but never undercounts a nesting the parser
//! would recurse into: comments, CDATA sections, processing instructions and declarations are
//! skipped whole, a start tag ends at the first `>` outside quotes, and only `</` outside those
//! closes a level.

/// Deeper than this is refused (real JSDL documents nest about ten levels).
pub(super) const MAX_DEPTH: usize = 100;

/// The byte offset of the first start tag nested deeper than [`MAX_DEPTH`], if any.
pub(super) fn too_deep(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let after = |from: usize, end: &[u8]| -> usize {
        b[from..]
            .windows(end.len())
            .position(|w| w == end)
            .map_or(b.len(), |p| from + p + end.len())
    };
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'<' {
            i += 1;
            continue;
        }
        let rest = &b[i..];
        if rest.starts_with(b"<!--") {
            i = after(i + 4, b"-->");
        } else if rest.starts_with(b"<![CDATA[") {
            i = after(i + 9, b"]]>");
        } else if rest.starts_with(b"<?") {
            i = after(i + 2, b"?>");
        } else if rest.starts_with(b"<!") {
            i = after(i + 2, b">");
        } else if rest.starts_with(b"</") {
            depth = depth.saturating_sub(1);
            i = after(i + 2, b">");
        } else {
            // A start tag: up to the first '>' outside a quoted attribute value.
            let mut j = i + 1;
            let mut quote = None;
            while j < b.len() {
                match (quote, b[j]) {
                    (Some(q), c) if c == q => quote = None,
                    (None, c @ (b'"' | b'\'')) => quote = Some(c),
                    (None, b'>') => break,
                    _ => {}
                }
                j += 1;
            }
            if j >= b.len() || b[j - 1] != b'/' {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(i);
                }
            }
            i = j + 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_levels_not_tags() {
        let nest = |n: usize| format!("{}{}", "<a>".repeat(n), "</a>".repeat(n));
        assert_eq!(too_deep(&nest(MAX_DEPTH)), None);
        assert_eq!(too_deep(&nest(MAX_DEPTH + 1)), Some(3 * MAX_DEPTH));
        let siblings = "<r>".to_string() + &"<a></a><b/>".repeat(1000) + "</r>";
        assert_eq!(too_deep(&siblings), None);
        let hidden = format!("<r><!--{0}--><![CDATA[{0}]]><?pi {0}?><x y='{0}'/></r>", "<a>".repeat(500));
        assert_eq!(too_deep(&hidden), None);
        // A '>' or '/>' inside a quoted value neither ends the tag nor closes it.
        let quoted = format!("<r>{}", "<a v='/>'>".repeat(MAX_DEPTH + 1));
        assert!(too_deep(&quoted).is_some());
    }
}
