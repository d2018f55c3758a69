//! The experiments' generated Markdown reports as HTML (pulldown-cmark), made self-contained:
//! an image that names one of the experiment's plots becomes that SVG inline, headings move
//! one level down (the page has its own title), and a cell under an "agrees?" column that is a
//! verdict becomes a coloured badge.

use pulldown_cmark::{CowStr, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// An SVG document (as written to a file) without its XML declaration, for inlining.
pub(crate) fn inline_svg(doc: &str) -> &str {
    match doc.strip_prefix("<?xml") {
        Some(rest) => rest.split_once("?>").map_or(doc, |(_, svg)| svg.trim_start()),
        None => doc,
    }
}

fn figure(svg: &str) -> String {
    format!("<figure class=\"chart\">{}</figure>", inline_svg(svg))
}

fn deeper(level: HeadingLevel) -> HeadingLevel {
    match level {
        HeadingLevel::H1 => HeadingLevel::H2,
        HeadingLevel::H2 => HeadingLevel::H3,
        HeadingLevel::H3 => HeadingLevel::H4,
        HeadingLevel::H4 => HeadingLevel::H5,
        _ => HeadingLevel::H6,
    }
}

/// Whether the events of a paragraph are only images (and the breaks between them).
fn only_images(inner: &[Event]) -> bool {
    let mut in_image = false;
    let mut any = false;
    for e in inner {
        match e {
            Event::Start(Tag::Image { .. }) => {
                in_image = true;
                any = true;
            }
            Event::End(TagEnd::Image) => in_image = false,
            _ if in_image => {}
            Event::SoftBreak | Event::HardBreak => {}
            Event::Text(t) if t.trim().is_empty() => {}
            _ => return false,
        }
    }
    any
}

/// Renders `md` to HTML; `plots` are (file name, SVG document) pairs.
pub(crate) fn to_html(md: &str, plots: &[(String, String)]) -> String {
    let find = |url: &str| plots.iter().find(|(n, _)| n == url).map(|(_, svg)| svg.as_str());
    let events: Vec<Event> = Parser::new_ext(md, Options::ENABLE_TABLES).collect();
    let mut out: Vec<Event> = Vec::with_capacity(events.len());
    let mut headers: Vec<String> = Vec::new();
    let (mut in_head, mut column, mut cell_text) = (false, 0usize, String::new());
    let mut k = 0;
    while k < events.len() {
        let ev = &events[k];
        match ev {
            // A paragraph of images only: the plots as figures, without the <p> (a figure
            // cannot be inside a paragraph).
            Event::Start(Tag::Paragraph) => {
                let end = events[k..]
                    .iter()
                    .position(|e| matches!(e, Event::End(TagEnd::Paragraph)))
                    .map(|p| k + p);
                if let Some(end) = end.filter(|&end| only_images(&events[k + 1..end])) {
                    let mut html = String::from("<div class=\"charts\">");
                    for e in &events[k + 1..end] {
                        if let Event::Start(Tag::Image { dest_url, .. }) = e {
                            match find(dest_url) {
                                Some(svg) => html.push_str(&figure(svg)),
                                None => html.push_str(&format!(
                                    "<p class=\"muted\">(plot {} not in this report)</p>",
                                    koalesce_web::chart::escape_xml(dest_url)
                                )),
                            }
                        }
                    }
                    html.push_str("</div>\n");
                    out.push(Event::Html(CowStr::from(html)));
                    k = end + 1;
                    continue;
                }
                out.push(ev.clone());
            }
            // An image in running text: the SVG inline (phrasing content), its alt text dropped.
            Event::Start(Tag::Image { dest_url, .. }) if find(dest_url).is_some() => {
                out.push(Event::Html(CowStr::from(
                    inline_svg(find(dest_url).unwrap_or_default()).to_string(),
                )));
                while k < events.len() && !matches!(events[k], Event::End(TagEnd::Image)) {
                    k += 1;
                }
            }
            Event::Start(Tag::Heading { level, id, classes, attrs }) => out.push(Event::Start(Tag::Heading {
                level: deeper(*level),
                id: id.clone(),
                classes: classes.clone(),
                attrs: attrs.clone(),
            })),
            Event::End(TagEnd::Heading(level)) => out.push(Event::End(TagEnd::Heading(deeper(*level)))),
            Event::Start(Tag::Table(_)) => {
                headers.clear();
                out.push(ev.clone());
            }
            Event::Start(Tag::TableHead) => {
                in_head = true;
                column = 0;
                out.push(ev.clone());
            }
            Event::End(TagEnd::TableHead) => {
                in_head = false;
                out.push(ev.clone());
            }
            Event::Start(Tag::TableRow) => {
                column = 0;
                out.push(ev.clone());
            }
            Event::Start(Tag::TableCell) => {
                cell_text.clear();
                out.push(ev.clone());
            }
            Event::End(TagEnd::TableCell) => {
                if in_head {
                    headers.push(cell_text.clone());
                }
                column += 1;
                out.push(ev.clone());
            }
            Event::Text(t) => {
                cell_text.push_str(t);
                let verdict_column = !in_head && headers.get(column).is_some_and(|h| h.contains("agrees"));
                match t.trim() {
                    v @ ("yes" | "partly" | "no") if verdict_column => {
                        out.push(Event::Html(CowStr::from(koalesce_web::html::verdict_badge(v).into_string())));
                    }
                    _ => out.push(ev.clone()),
                }
            }
            // Raw HTML in the Markdown (a cell reading "<x>") is shown as text, never markup.
            Event::Html(h) | Event::InlineHtml(h) => out.push(Event::Text(h.clone())),
            _ => out.push(ev.clone()),
        }
        k += 1;
    }
    let mut html = String::with_capacity(md.len() * 2);
    pulldown_cmark::html::push_html(&mut html, out.into_iter());
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_become_inline_plots_and_verdicts_badges() {
        let md = "# Title\n\nSome *text* & more.\n\n| quantity | seed | agrees? | stable |\n|---|---|---|---|\n| util | 40 | partly | no |\n| <x> | 1 | yes | yes |\n\n![a.svg](a.svg)\n![b.svg](b.svg)\n\nInline ![c](a.svg) in text.\n";
        let plots = vec![
            (
                "a.svg".to_string(),
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg id=\"A\"></svg>".to_string(),
            ),
            ("b.svg".to_string(), "<svg id=\"B\"></svg>".to_string()),
        ];
        let html = to_html(md, &plots);
        assert!(html.contains("<h2>Title</h2>"), "{html}");
        assert!(html.contains("<div class=\"charts\"><figure class=\"chart\"><svg id=\"A\"></svg></figure><figure class=\"chart\"><svg id=\"B\"></svg></figure></div>"), "{html}");
        assert!(!html.contains("<?xml"));
        // Only the "agrees?" column gets badges; "no" under "stable" stays text.
        assert!(
            html.contains("<td><span class=\"badge verdict-partly\">partly</span></td><td>no</td>"),
            "{html}"
        );
        assert!(
            html.contains("<span class=\"badge verdict-yes\">yes</span></td><td>yes</td>"),
            "{html}"
        );
        assert!(html.contains("&lt;x&gt;") && html.contains("&amp; more"));
        // An image inside text becomes the SVG itself.
        assert!(html.contains("<p>Inline <svg id=\"A\"></svg> in text.</p>"), "{html}");
        assert!(!html.contains("<img"));
    }

    #[test]
    fn missing_plots_are_named_not_linked() {
        let html = to_html("![gone.svg](gone.svg)\n", &[]);
        assert!(
            html.contains("(plot gone.svg not in this report)") && !html.contains("<img"),
            "{html}"
        );
    }
}
