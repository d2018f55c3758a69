//! ureq agents that do not start a thread per request.
//!
//! ureq's `DefaultResolver` looks the host up again on every request, even one that reuses a
//! pooled keep-alive connection, and when a timeout applies (every agent here has one) it does
//! the lookup in a thread spawned for that request, so that it can give up waiting. A server
//! URL is most often an IP address (`http://127.0.0.1:8080`), where there is nothing to look up:
//! [`LiteralFirst`] answers those without a thread and hands host names to ureq's resolver
//! unchanged. `bench submit` measured the spawn as a large share of the client's CPU time,
//! which on a 2-core machine the server then lacked.

use std::net::{IpAddr, SocketAddr};

use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

/// Resolves IP-literal hosts in place; everything else goes to ureq's [`DefaultResolver`].
#[derive(Debug, Default)]
pub struct LiteralFirst {
    fallback: DefaultResolver,
}

/// The address of `uri` when its host is an IP literal (`127.0.0.1`, `[::1]`) and its port
/// is given or implied by `http`/`https`; `None` for a host name.
pub fn literal_addr(uri: &Uri) -> Option<SocketAddr> {
    let authority = uri.authority()?;
    let host = authority.host();
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let ip: IpAddr = host.parse().ok()?;
    let port = match authority.port_u16() {
        Some(p) => p,
        None => match uri.scheme_str()? {
            "http" => 80,
            "https" => 443,
            _ => return None,
        },
    };
    Some(SocketAddr::new(ip, port))
}

impl Resolver for LiteralFirst {
    fn resolve(&self, uri: &Uri, config: &Config, timeout: NextTimeout) -> Result<ResolvedSocketAddrs, ureq::Error> {
        match literal_addr(uri) {
            Some(addr) => {
                let mut out = self.empty();
                out.push(addr);
                Ok(out)
            }
            None => self.fallback.resolve(uri, config, timeout),
        }
    }
}

/// An agent with `config` that resolves IP literals without a thread ([`LiteralFirst`]).
pub fn agent(config: Config) -> ureq::Agent {
    ureq::Agent::with_parts(config, DefaultConnector::new(), LiteralFirst::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(u: &str) -> Option<SocketAddr> {
        literal_addr(&u.parse::<Uri>().unwrap())
    }

    #[test]
    fn ip_literals_resolve_in_place_and_names_do_not() {
        assert_eq!(addr("http://127.0.0.1:8080/api/jobs"), Some("127.0.0.1:8080".parse().unwrap()));
        assert_eq!(addr("http://10.1.2.3/x"), Some("10.1.2.3:80".parse().unwrap()));
        assert_eq!(addr("https://10.1.2.3/x"), Some("10.1.2.3:443".parse().unwrap()));
        assert_eq!(addr("http://[::1]:9/x"), Some("[::1]:9".parse().unwrap()));
        assert_eq!(addr("http://localhost:8080/x"), None);
        assert_eq!(addr("http://example.org/x"), None);
        assert_eq!(addr("ftp://10.1.2.3/x"), None);
    }

    #[test]
    fn an_agent_reaches_a_server_by_ip_and_by_name() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            for _ in 0..2 {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).unwrap();
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                    .unwrap();
            }
        });
        let a = agent(
            ureq::Agent::config_builder()
                .timeout_global(Some(std::time::Duration::from_secs(10)))
                .build(),
        );
        for host in ["127.0.0.1", "localhost"] {
            let mut r = a.get(&format!("http://{host}:{port}/")).call().unwrap();
            assert_eq!(r.body_mut().read_to_string().unwrap(), "ok");
        }
        server.join().unwrap();
    }
}
