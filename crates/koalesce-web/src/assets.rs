//! The assets, embedded in the binary: one stylesheet and one small script. No build step,
//! no CDN: the dashboard and the reports work offline.

/// An embedded file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    /// The file name under [`PREFIX`]: "koalesce.css".
    pub name: &'static str,
    pub content_type: &'static str,
    pub body: &'static str,
}

/// Where the server serves the assets: `/static/NAME`.
pub const PREFIX: &str = "/static/";

/// The stylesheet (also inlined in the self-contained reports).
pub const CSS: Asset = Asset {
    name: "koalesce.css",
    content_type: "text/css; charset=utf-8",
    body: include_str!("assets/koalesce.css"),
};

/// The script: live regions over server-sent events, confirmations, local times.
pub const JS: Asset = Asset {
    name: "koalesce.js",
    content_type: "text/javascript; charset=utf-8",
    body: include_str!("assets/koalesce.js"),
};

/// The icon (a tab shows it; without one browsers ask for `/favicon.ico`).
pub const ICON: Asset = Asset {
    name: "favicon.svg",
    content_type: "image/svg+xml",
    body: include_str!("assets/favicon.svg"),
};

pub const ALL: [Asset; 3] = [CSS, JS, ICON];

/// The asset a request path names (`/static/koalesce.css`, with or without a `?v=` query), if
/// any. The server answers these with `Cache-Control: public, max-age=31536000, immutable`:
/// [`Asset::url`] changes when the content does.
pub fn get(path: &str) -> Option<Asset> {
    let path = path.split('?').next().unwrap_or(path);
    let name = path.strip_prefix(PREFIX)?;
    ALL.into_iter().find(|a| a.name == name)
}

impl Asset {
    /// FNV-1a of the content: names a version of the asset.
    pub fn hash(&self) -> u64 {
        self.body
            .bytes()
            .fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
    }

    /// The URL to link: `/static/koalesce.css?v=1a2b3c4d` (new content, new URL).
    pub fn url(&self) -> String {
        format!("{PREFIX}{}?v={:08x}", self.name, self.hash() as u32)
    }

    /// The asset as a `data:` URL, for self-contained documents.
    pub fn data_url(&self) -> String {
        let mut out = format!("data:{},", self.content_type.split(';').next().unwrap_or(self.content_type));
        for c in self.body.trim().chars() {
            match c {
                '#' => out.push_str("%23"),
                '%' => out.push_str("%25"),
                '<' => out.push_str("%3C"),
                '>' => out.push_str("%3E"),
                '"' => out.push('\''),
                '\n' => {}
                c => out.push(c),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_found_by_path_and_versioned() {
        assert_eq!(get("/static/koalesce.css"), Some(CSS));
        assert_eq!(get(&JS.url()), Some(JS));
        assert_eq!(get("/static/../Cargo.toml"), None);
        assert_eq!(get("/koalesce.css"), None);
        assert!(CSS.url().starts_with("/static/koalesce.css?v="));
        assert_ne!(CSS.hash(), JS.hash());
        assert_eq!(get("/static/favicon.svg"), Some(ICON));
        let d = ICON.data_url();
        assert!(
            d.starts_with("data:image/svg+xml,%3Csvg") && !d.contains('"') && !d.contains('#'),
            "{d}"
        );
    }

    #[test]
    fn the_stylesheet_styles_every_state_and_verdict() {
        for class in [
            ".state-queued",
            ".state-placed",
            ".state-claimed",
            ".state-running",
            ".state-succeeded",
            ".state-failed",
            ".state-cancelled",
            ".verdict-yes",
            ".verdict-partly",
            ".verdict-no",
            "figure.chart",
        ] {
            assert!(CSS.body.contains(class), "{class}");
        }
        // Nothing is fetched from elsewhere.
        for body in [CSS.body, JS.body] {
            assert!(!body.contains("http://") && !body.contains("https://") && !body.contains("@import"));
        }
    }
}
