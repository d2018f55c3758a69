//! OGF JSDL 1.0 (GFD.56) with the POSIX Application extension, the HPC Profile Application
//! extension (GFD.111) and the SPMD Application extension (GFD.115, in `spmd`), read with
//! roxmltree (namespaces, positions, entities, CDATA; DTDs are refused).
//!
//! Every element must be in the JSDL, JSDL-POSIX, JSDL-HPCPA or JSDL-SPMD namespace and known there;
//! each maps onto the native description or is an error naming it and its line. Attributes
//! of the XML Schema instance namespace (`xsi:schemaLocation`) are accepted; other foreign
//! attributes are errors.

mod application;
mod depth;
mod range;
mod spmd;

use koalesce_api::fields::FlexibleDescription;
use koalesce_api::fields::{format_seconds, format_size, OutputFile};
use koalesce_api::{ComponentDescription, JobDescription, Runner};
use roxmltree::{Document, Node, ParsingOptions};

use crate::common::{blank_job, default_name, locate, relative_name, staged, FormatError, Location, Requirements};
use crate::Format;
use range::{Alt, Range};

const FMT: Format = Format::Jsdl;
pub const NS_JSDL: &str = "http://schemas.ggf.org/jsdl/2005/11/jsdl";
pub const NS_POSIX: &str = "http://schemas.ggf.org/jsdl/2005/11/jsdl-posix";
pub const NS_HPCPA: &str = "http://schemas.ggf.org/jsdl/2006/07/jsdl-hpcpa";
/// NorduGrid ARC's JSDL extension (its nordugrid-jsdl.xsd); ARC's own parser also took
/// some of its elements in the JSDL namespace (jsdl:QueueName, jsdl:URIOption).
pub const NS_ARC: &str = "http://www.nordugrid.org/ws/schemas/jsdl-arc";
/// The SPMD Application extension (GFD.115).
pub const NS_SPMD: &str = "http://schemas.ogf.org/jsdl/2007/02/jsdl-spmd";
const NS_XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";
const JOB_DIR: &str = "${KOALESCE_JOB_DIR}";

struct Reader<'a> {
    doc: &'a Document<'a>,
}

fn prefix_of(ns: Option<&str>) -> String {
    match ns {
        Some(NS_JSDL) => "jsdl:".into(),
        Some(NS_POSIX) => "jsdl-posix:".into(),
        Some(NS_HPCPA) => "jsdl-hpcpa:".into(),
        Some(NS_SPMD) => "jsdl-spmd:".into(),
        Some(NS_ARC) => "jsdl-arc:".into(),
        Some(other) => format!("{{{other}}}"),
        None => String::new(),
    }
}

fn qname(n: Node) -> String {
    format!("{}{}", prefix_of(n.tag_name().namespace()), n.tag_name().name())
}

impl<'a> Reader<'a> {
    fn err(&self, n: Node, m: impl Into<String>) -> FormatError {
        let p = self.doc.text_pos_at(n.range().start);
        FormatError::at(FMT, p.row as usize, Some(p.col as usize), m)
    }

    /// Element children; text other than blanks between elements is an error.
    fn elements(&self, n: Node<'a, 'a>) -> Result<Vec<Node<'a, 'a>>, FormatError> {
        let mut out = Vec::new();
        for c in n.children() {
            if c.is_element() {
                out.push(c);
            } else if c.is_text() && !c.text().unwrap_or("").trim().is_empty() {
                return Err(self.err(c, format!("unexpected text in {}", qname(n))));
            }
        }
        Ok(out)
    }

    /// The text content of a simple element (CDATA and entities included), trimmed.
    fn text(&self, n: Node) -> Result<String, FormatError> {
        let mut s = String::new();
        for c in n.children() {
            if c.is_element() {
                return Err(self.err(c, format!("{} cannot contain element {}", qname(n), qname(c))));
            }
            if c.is_text() {
                s.push_str(c.text().unwrap_or(""));
            }
        }
        Ok(s.trim().to_string())
    }

    /// Checks attributes: only `allowed` (no namespace) and xsi:* attributes.
    fn attrs(&self, n: Node, allowed: &[&str]) -> Result<(), FormatError> {
        for a in n.attributes() {
            match a.namespace() {
                Some(NS_XSI) => {}
                None if allowed.contains(&a.name()) => {}
                _ => {
                    return Err(self.err(
                        n,
                        format!(
                            "attribute '{}{}' of {} cannot be honoured",
                            prefix_of(a.namespace()),
                            a.name(),
                            qname(n)
                        ),
                    ))
                }
            }
        }
        Ok(())
    }

    fn unknown(&self, n: Node) -> FormatError {
        let m = match n.tag_name().namespace() {
            Some(NS_JSDL) | Some(NS_POSIX) | Some(NS_HPCPA) | Some(NS_SPMD) => format!("element {} is not known here", qname(n)),
            Some(ns) => format!(
                "element {} is from an extension namespace koalesce does not support ({ns})",
                n.tag_name().name()
            ),
            None => format!("element {} has no namespace (JSDL elements are in {NS_JSDL})", n.tag_name().name()),
        };
        self.err(n, m)
    }

    fn is(&self, n: Node, ns: &str, name: &str) -> bool {
        n.tag_name().namespace() == Some(ns) && n.tag_name().name() == name
    }

    fn number(&self, n: Node) -> Result<f64, FormatError> {
        let t = self.text(n)?;
        t.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| self.err(n, format!("{}: '{t}' is not a non-negative number", qname(n))))
    }

    fn boolean(&self, n: Node) -> Result<bool, FormatError> {
        match self.text(n)?.to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            t => Err(self.err(n, format!("{}: '{t}' is not true or false", qname(n)))),
        }
    }

    /// A RangeValue_Type element (or, leniently, a bare number).
    fn range(&self, n: Node<'a, 'a>) -> Result<Range, FormatError> {
        let kids = self.elements(n)?;
        if kids.is_empty() {
            let v = self.number(n)?;
            return Ok(Range {
                alts: vec![Alt::Exact { value: v, epsilon: 0.0 }],
            });
        }
        let bound = |k: Node| -> Result<(f64, bool), FormatError> {
            self.attrs(k, &["exclusiveBound"])?;
            let excl = k.attribute("exclusiveBound").is_some_and(|v| v == "true" || v == "1");
            Ok((self.number(k)?, excl))
        };
        let mut r = Range::default();
        for k in kids {
            if k.tag_name().namespace() != Some(NS_JSDL) {
                return Err(self.unknown(k));
            }
            match k.tag_name().name() {
                "UpperBoundedRange" => r.alts.push(Alt::Bounds {
                    lower: None,
                    upper: Some(bound(k)?),
                }),
                "LowerBoundedRange" => r.alts.push(Alt::Bounds {
                    lower: Some(bound(k)?),
                    upper: None,
                }),
                "Exact" => {
                    self.attrs(k, &["epsilon"])?;
                    let epsilon = match k.attribute("epsilon") {
                        Some(e) => e
                            .trim()
                            .parse::<f64>()
                            .ok()
                            .filter(|e| e.is_finite() && *e >= 0.0)
                            .ok_or_else(|| self.err(k, "epsilon is not a number"))?,
                        None => 0.0,
                    };
                    r.alts.push(Alt::Exact {
                        value: self.number(k)?,
                        epsilon,
                    });
                }
                "Range" => {
                    self.attrs(k, &[])?;
                    let (mut lower, mut upper) = (None, None);
                    for b in self.elements(k)? {
                        match (b.tag_name().namespace(), b.tag_name().name()) {
                            (Some(NS_JSDL), "LowerBound") => lower = Some(bound(b)?),
                            (Some(NS_JSDL), "UpperBound") => upper = Some(bound(b)?),
                            _ => return Err(self.unknown(b)),
                        }
                    }
                    if lower.is_none() || upper.is_none() {
                        return Err(self.err(k, "jsdl:Range needs a LowerBound and an UpperBound"));
                    }
                    r.alts.push(Alt::Bounds { lower, upper });
                }
                _ => return Err(self.unknown(k)),
            }
        }
        Ok(r)
    }
}

/// What the Resources element asks for.
#[derive(Default)]
struct Resources {
    req: Requirements,
    individual_cpus: Option<u64>,
    total_cpus: Option<u64>,
    resource_count: Option<u64>,
    individual_memory: Option<u64>,
    total_memory: Option<u64>,
    cputime: Option<u64>,
    virtual_memory: Option<u64>,
    filesystems: Vec<String>,
}

/// JSDL CPUArchitectureName → the ARCH patterns sites publish.
fn arch_patterns(name: &str) -> Vec<String> {
    let v: &[&str] = match name {
        "x86" => &["x86*", "i?86"],
        "x86_32" => &["x86_32", "i?86", "x86"],
        "x86_64" => &["x86_64", "amd64"],
        "powerpc" => &["powerpc*", "ppc*"],
        "ia64" => &["ia64"],
        "arm" => &["arm*", "aarch64"],
        other => return vec![other.to_string()],
    };
    v.iter().map(|s| s.to_string()).collect()
}

impl<'a> Reader<'a> {
    fn resources(&self, n: Node<'a, 'a>, out: &mut Resources) -> Result<(), FormatError> {
        self.attrs(n, &[])?;
        for k in self.elements(n)? {
            // ARC's QueueName (jsdl-arc:, or jsdl: as ARC's parser also took it), with
            // require="ne" for "not this queue".
            if matches!(k.tag_name().namespace(), Some(NS_ARC | NS_JSDL)) && k.tag_name().name() == "QueueName" {
                self.attrs(k, &["require"])?;
                let op = match k.attribute("require").map(str::trim) {
                    None | Some("eq") => "=",
                    Some("ne") => "!=",
                    Some(other) => return Err(self.err(k, format!("{}@require '{other}': only eq and ne apply to a queue name", qname(k)))),
                };
                out.req.add(format!("QUEUE_NAME {op} \"{}\"", self.text(k)?.replace('"', "")));
                continue;
            }
            if k.tag_name().namespace() != Some(NS_JSDL) {
                return Err(self.unknown(k));
            }
            self.attrs(k, if k.tag_name().name() == "FileSystem" { &["name"] } else { &[] })?;
            let whole = |r: Range, what: &str| {
                r.smallest_whole(0.0)
                    .ok_or_else(|| self.err(k, format!("{what}: the range admits no value")))
            };
            let limit = |r: Range, what: &str| {
                r.limit()
                    .ok_or_else(|| self.err(k, format!("{what}: the range gives no positive limit")))
            };
            match k.tag_name().name() {
                // GridWay's own examples write CandidateHost; JSDL 1.0 says CandidateHosts.
                "CandidateHosts" | "CandidateHost" => {
                    let mut hosts = Vec::new();
                    for h in self.elements(k)? {
                        if !self.is(h, NS_JSDL, "HostName") {
                            return Err(self.unknown(h));
                        }
                        hosts.push(self.text(h)?);
                    }
                    if hosts.is_empty() {
                        return Err(self.err(k, "jsdl:CandidateHosts names no HostName"));
                    }
                    out.req.any_of("HOSTNAME", &hosts);
                }
                "FileSystem" => {
                    let name = k.attribute("name").unwrap_or_default().to_string();
                    if !matches!(name.as_str(), "HOME" | "SCRATCH" | "TMP") {
                        return Err(self.err(
                            k,
                            format!("file system '{name}' cannot be honoured (HOME, SCRATCH and TMP are the job's own directory)"),
                        ));
                    }
                    for f in self.elements(k)? {
                        match (f.tag_name().namespace(), f.tag_name().name()) {
                            (Some(NS_JSDL), "Description" | "FileSystemType") => {
                                self.text(f)?;
                            }
                            (Some(NS_JSDL), "DiskSpace") => {
                                out.req.add(self.range(f)?.expression("FREE_DISK_MB", 1.0 / 1_048_576.0));
                            }
                            (Some(NS_JSDL), "MountPoint" | "MountSource") => {
                                return Err(self.err(
                                    f,
                                    format!("{}: koalesce mounts nothing; a job sees only its own directory", qname(f)),
                                ))
                            }
                            _ => return Err(self.unknown(f)),
                        }
                    }
                    out.filesystems.push(name);
                }
                "ExclusiveExecution" => {
                    if self.boolean(k)? {
                        return Err(self.err(
                            k,
                            "jsdl:ExclusiveExecution: whole hosts cannot be reserved; koalesce allocates processors",
                        ));
                    }
                }
                "OperatingSystem" => {
                    for o in self.elements(k)? {
                        match (o.tag_name().namespace(), o.tag_name().name()) {
                            (Some(NS_JSDL), "OperatingSystemType") => {
                                for t in self.elements(o)? {
                                    if !self.is(t, NS_JSDL, "OperatingSystemName") {
                                        return Err(self.unknown(t));
                                    }
                                    out.req.any_of("OS_NAME", &[self.text(t)?]);
                                }
                            }
                            (Some(NS_JSDL), "OperatingSystemVersion") => out.req.any_of("OS_VERSION", &[self.text(o)?]),
                            (Some(NS_JSDL), "Description") => {
                                self.text(o)?;
                            }
                            _ => return Err(self.unknown(o)),
                        }
                    }
                }
                "CPUArchitecture" => {
                    for a in self.elements(k)? {
                        if !self.is(a, NS_JSDL, "CPUArchitectureName") {
                            return Err(self.unknown(a));
                        }
                        out.req.any_of("ARCH", &arch_patterns(&self.text(a)?));
                    }
                }
                "IndividualCPUSpeed" => out.req.add(self.range(k)?.expression("CPU_MHZ", 1e-6)),
                "IndividualCPUTime" => out.cputime = Some(limit(self.range(k)?, "IndividualCPUTime")?),
                "TotalCPUTime" => out.cputime = out.cputime.or(Some(limit(self.range(k)?, "TotalCPUTime")?)),
                "IndividualCPUCount" => out.individual_cpus = Some(whole(self.range(k)?, "IndividualCPUCount")?.max(1)),
                "TotalCPUCount" => out.total_cpus = Some(whole(self.range(k)?, "TotalCPUCount")?.max(1)),
                "TotalResourceCount" => out.resource_count = Some(whole(self.range(k)?, "TotalResourceCount")?.max(1)),
                "IndividualPhysicalMemory" => out.individual_memory = Some(limit(self.range(k)?, "IndividualPhysicalMemory")?),
                "TotalPhysicalMemory" => out.total_memory = Some(limit(self.range(k)?, "TotalPhysicalMemory")?),
                "IndividualVirtualMemory" => out.virtual_memory = Some(limit(self.range(k)?, "IndividualVirtualMemory")?),
                "IndividualDiskSpace" | "TotalDiskSpace" => out.req.add(self.range(k)?.expression("FREE_DISK_MB", 1.0 / 1_048_576.0)),
                "IndividualNetworkBandwidth" => {
                    return Err(self.err(k, "jsdl:IndividualNetworkBandwidth: koalesce does not select sites by bandwidth"))
                }
                "TotalVirtualMemory" => return Err(self.err(k, "jsdl:TotalVirtualMemory cannot be honoured; give IndividualVirtualMemory")),
                _ => return Err(self.unknown(k)),
            }
        }
        Ok(())
    }

    /// A path in an element with an optional filesystemName: HOME, SCRATCH and TMP are the
    /// job's own directory.
    fn path(&self, n: Node, fs: &[String]) -> Result<String, FormatError> {
        let t = subst(&self.text(n)?);
        match n.attribute("filesystemName") {
            None => Ok(t),
            Some(f) if matches!(f, "HOME" | "SCRATCH" | "TMP") => {
                if !fs.is_empty() && !fs.iter().any(|x| x == f) {
                    return Err(self.err(n, format!("file system '{f}' is not declared in jsdl:Resources")));
                }
                Ok(format!("{JOB_DIR}/{}", t.trim_start_matches('/')))
            }
            Some(f) => Err(self.err(
                n,
                format!("file system '{f}' cannot be honoured (HOME, SCRATCH and TMP are the job's own directory)"),
            )),
        }
    }
}

/// GridWay's substitution variables, which GridWay's JSDL examples use.
fn subst(s: &str) -> String {
    s.replace("${JOB_ID}", "${KOALESCE_JOB_ID}").replace("${ARCH}", "${KOALESCE_ARCH}")
}

/// A path the job refers to, relative to its directory: `${KOALESCE_JOB_DIR}/x` → `x`.
fn local_path(p: &str) -> String {
    p.strip_prefix(JOB_DIR)
        .map(|r| r.trim_start_matches('/').to_string())
        .unwrap_or_else(|| p.to_string())
}

/// Converts a JSDL document.
pub fn convert(text: &str, name_hint: Option<&str>) -> Result<JobDescription, FormatError> {
    if let Some(at) = depth::too_deep(text) {
        let line = text[..at].matches('\n').count() + 1;
        let column = text[..at].rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        let m = format!("elements nested deeper than {} levels", depth::MAX_DEPTH);
        return Err(FormatError::at(FMT, line, Some(column), m));
    }
    let opts = ParsingOptions {
        allow_dtd: false,
        nodes_limit: 100_000,
    };
    let doc = Document::parse_with_options(text, opts).map_err(|e| {
        let p = e.pos();
        // An undeclared prefix of a JSDL namespace (GridWay's own HPCProfileExample.xml uses
        // jsdl-hpcpa: without declaring it): say which declaration is missing.
        let hint = match &e {
            roxmltree::Error::UnknownNamespace(prefix, _) => match prefix.as_str() {
                "jsdl" => format!(" (declare xmlns:jsdl=\"{NS_JSDL}\")"),
                "jsdl-posix" => format!(" (declare xmlns:jsdl-posix=\"{NS_POSIX}\")"),
                "jsdl-hpcpa" => format!(" (declare xmlns:jsdl-hpcpa=\"{NS_HPCPA}\")"),
                "jsdl-spmd" => format!(" (declare xmlns:jsdl-spmd=\"{NS_SPMD}\")"),
                _ => String::new(),
            },
            _ => String::new(),
        };
        FormatError::at(FMT, p.row as usize, Some(p.col as usize), format!("not well-formed XML: {e}{hint}"))
    })?;
    let rd = Reader { doc: &doc };
    let root = doc.root_element();
    if !rd.is(root, NS_JSDL, "JobDefinition") {
        let m = match root.tag_name().namespace() {
            _ if root.tag_name().name() != "JobDefinition" => format!("the root element is {}, not jsdl:JobDefinition", qname(root)),
            Some(ns) => format!("JobDefinition is in namespace {ns}; JSDL 1.0's is {NS_JSDL}"),
            None => format!("JobDefinition has no namespace; JSDL 1.0's is {NS_JSDL}"),
        };
        return Err(rd.err(root, m));
    }
    rd.attrs(root, &["id"])?;
    let kids = rd.elements(root)?;
    let descs: Vec<_> = kids.iter().filter(|k| rd.is(**k, NS_JSDL, "JobDescription")).collect();
    if let Some(other) = kids.iter().find(|k| !rd.is(**k, NS_JSDL, "JobDescription")) {
        return Err(rd.unknown(*other));
    }
    let desc = match descs.as_slice() {
        [d] => **d,
        [] => return Err(rd.err(root, "jsdl:JobDefinition has no jsdl:JobDescription")),
        [_, second, ..] => return Err(rd.err(**second, "a second jsdl:JobDescription")),
    };
    rd.attrs(desc, &[])?;

    let mut name = None;
    let mut app = None;
    let mut res = Resources::default();
    let mut staging = Vec::new();
    for k in rd.elements(desc)? {
        if k.tag_name().namespace() != Some(NS_JSDL) {
            return Err(rd.unknown(k));
        }
        match k.tag_name().name() {
            "JobIdentification" => {
                rd.attrs(k, &[])?;
                for i in rd.elements(k)? {
                    match (i.tag_name().namespace(), i.tag_name().name()) {
                        (Some(NS_JSDL), "JobName") => name = Some(rd.text(i)?),
                        (Some(NS_JSDL), "Description" | "JobAnnotation") => {
                            rd.text(i)?;
                        }
                        (Some(NS_JSDL), "JobProject") => return Err(rd.err(i, "jsdl:JobProject: koalesce has no accounting projects")),
                        _ => return Err(rd.unknown(i)),
                    }
                }
            }
            "Application" => {
                rd.attrs(k, &[])?;
                app = Some(k);
            }
            "Resources" => rd.resources(k, &mut res)?,
            "DataStaging" => staging.push(k),
            _ => return Err(rd.unknown(k)),
        }
    }
    let Some(app) = app else {
        return Err(rd.err(desc, "jsdl:JobDescription has no jsdl:Application"));
    };
    let mut job = blank_job(
        default_name(name.as_deref().or(name_hint).filter(|n| !n.is_empty()), "jsdl-job"),
        String::new(),
    );
    let mut posix = None;
    for a in rd.elements(app)? {
        match (a.tag_name().namespace(), a.tag_name().name()) {
            (Some(NS_JSDL), "ApplicationName" | "ApplicationVersion" | "Description") => {
                rd.text(a)?;
            }
            (Some(NS_POSIX), "POSIXApplication") | (Some(NS_HPCPA), "HPCProfileApplication") | (Some(NS_SPMD), "SPMDApplication") => {
                if posix.is_some() {
                    return Err(rd.err(a, "a second application element"));
                }
                posix = Some(a);
            }
            _ => return Err(rd.unknown(a)),
        }
    }
    let Some(posix) = posix else {
        return Err(rd.err(
            app,
            "jsdl:Application has no jsdl-posix:POSIXApplication, jsdl-hpcpa:HPCProfileApplication or jsdl-spmd:SPMDApplication",
        ));
    };
    let (memory_limit, spmd) = application::application(&rd, posix, &mut job, &res.filesystems)?;

    // Data staging: Source → an input from the catalogue, Target → an output registered
    // under the target's logical name.
    let mut staged_names: Vec<String> = Vec::new();
    for s in staging {
        rd.attrs(s, &["name"])?;
        let (mut file, mut source, mut target) = (None, None, None);
        let mut fs_name: Option<String> = None;
        let mut is_exec = false;
        for d in rd.elements(s)? {
            match (d.tag_name().namespace(), d.tag_name().name()) {
                (Some(NS_JSDL), "FileName") => file = Some((subst(&rd.text(d)?), d)),
                // GFD.56 §6.3.2 spells it FilesystemName; FileSystemName is taken too.
                (Some(NS_JSDL), "FilesystemName" | "FileSystemName") => fs_name = Some(rd.text(d)?),
                // ARC's extension: the staged file is a program.
                (Some(NS_ARC), "IsExecutable") => is_exec = rd.boolean(d)?,
                (Some(NS_JSDL), "CreationFlag") => {
                    let f = rd.text(d)?;
                    if !matches!(f.as_str(), "overwrite" | "dontOverwrite" | "append") {
                        return Err(rd.err(d, format!("jsdl:CreationFlag '{f}': expected overwrite, dontOverwrite or append")));
                    }
                }
                // The component's directory and its copies are kept for `koalesce status`;
                // removing them is the server's retention policy.
                (Some(NS_JSDL), "DeleteOnTermination") => {
                    rd.boolean(d)?;
                }
                (Some(NS_JSDL), "Source" | "Target") => {
                    let mut uri = None;
                    for u in rd.elements(d)? {
                        if matches!(u.tag_name().namespace(), Some(NS_JSDL | NS_ARC)) && u.tag_name().name() == "URIOption" {
                            return Err(rd.err(
                                u,
                                format!(
                                    "{} '{}': ARC's transfer options cannot be honoured (koalesce moves files itself)",
                                    qname(u),
                                    rd.text(u)?
                                ),
                            ));
                        }
                        if !rd.is(u, NS_JSDL, "URI") {
                            return Err(rd.unknown(u));
                        }
                        uri = Some(subst(&rd.text(u)?));
                    }
                    let uri = uri.ok_or_else(|| rd.err(d, format!("{} has no jsdl:URI", qname(d))))?;
                    if d.tag_name().name() == "Source" {
                        source = Some((uri, d));
                    } else {
                        target = Some((uri, d));
                    }
                }
                _ => return Err(rd.unknown(d)),
            }
        }
        let (file, fnode) = file.ok_or_else(|| rd.err(s, "jsdl:DataStaging has no jsdl:FileName"))?;
        if let Some(f) = &fs_name {
            if !matches!(f.as_str(), "HOME" | "SCRATCH" | "TMP") {
                return Err(rd.err(
                    s,
                    format!("file system '{f}' cannot be honoured (HOME, SCRATCH and TMP are the job's own directory)"),
                ));
            }
        }
        let local = relative_name("jsdl:FileName", &local_path(&file)).map_err(|m| rd.err(fnode, m))?;
        if source.is_none() && target.is_none() {
            // GFD.56 §6.3 makes Source and Target optional; a file with neither is one the job
            // makes. ARC (whose client writes these for stdout and stderr) keeps it for the
            // user to fetch: an output kept with the job (`<job-id>/name`), as xRSL's
            // outputFiles ("name" "").
            job.outputs.push(OutputFile {
                file: local.clone(),
                to: None,
            });
        }
        if is_exec && source.is_none() {
            return Err(rd.err(
                s,
                format!("jsdl-arc:IsExecutable of '{local}': only a staged-in file can be marked executable"),
            ));
        }
        if let Some((uri, node)) = source {
            let logical = match locate(&uri).map_err(|m| rd.err(node, format!("jsdl:Source of '{local}': {m}")))? {
                Location::Catalogue(l) => l,
                Location::Absolute(a) => {
                    return Err(rd.err(
                        node,
                        format!("jsdl:Source of '{local}': '{a}' is a path, not a URI or logical name"),
                    ))
                }
            };
            if staged_names.contains(&local) {
                return Err(rd.err(s, format!("'{local}' is staged in twice")));
            }
            staged_names.push(local.clone());
            job.inputs.push(staged(&logical, Some(&local), is_exec));
        }
        if let Some((uri, node)) = target {
            let to = match locate(&uri).map_err(|m| rd.err(node, format!("jsdl:Target of '{local}': {m}")))? {
                Location::Catalogue(l) => l,
                Location::Absolute(a) => {
                    return Err(rd.err(
                        node,
                        format!("jsdl:Target of '{local}': '{a}' is a path, not a URI or logical name"),
                    ))
                }
            };
            job.outputs.push(OutputFile { file: local, to: Some(to) });
        }
    }
    // A relative executable that is staged in runs from the working directory.
    if let Some(f) = job
        .inputs
        .iter_mut()
        .find(|f| f.local_name() == job.executable.trim_start_matches("./"))
    {
        f.executable = true;
        job.executable = format!("./{}", f.local_name());
    }

    // Processors: per resource and in total (GFD.56 §6.2).
    let (i, t, r) = (res.individual_cpus, res.total_cpus, res.resource_count);
    let count_err = |m: String| rd.err(desc, m);
    let comps = |n: u64, each: u64| -> Result<Vec<ComponentDescription>, FormatError> {
        if n > 100_000 || each > u32::MAX as u64 {
            return Err(count_err(format!("{n} resources of {each} CPUs is too large")));
        }
        Ok((0..n).map(|_| ComponentDescription::new(each as u32)).collect())
    };
    if let Some(sp) = &spmd {
        spmd::components(&rd, sp, &res, &mut job)?;
    } else {
        match (i, t, r) {
            // One CPU in all (GFD.56's own gnuplot example says TotalCPUCount Exact 1.0):
            // one processor, nothing to split.
            (None, Some(1), None) => job.components = comps(1, 1)?,
            (None, Some(total), None) => {
                job.flexible = Some(FlexibleDescription {
                    total: u32::try_from(total).map_err(|_| count_err(format!("TotalCPUCount {total} is too large")))?,
                    min_component: None,
                    max_components: None,
                })
            }
            (Some(each), Some(total), r) => {
                if !total.is_multiple_of(each) || r.is_some_and(|r| r.checked_mul(each) != Some(total)) {
                    return Err(count_err(format!(
                        "TotalCPUCount {total} is not a whole number of resources of IndividualCPUCount {each}"
                    )));
                }
                job.components = comps(total / each, each)?;
            }
            (None, Some(total), Some(r)) => {
                if !total.is_multiple_of(r) {
                    return Err(count_err(format!(
                        "TotalCPUCount {total} does not split evenly over TotalResourceCount {r}"
                    )));
                }
                job.components = comps(r, total / r)?;
            }
            (each, None, r) => job.components = comps(r.unwrap_or(1), each.unwrap_or(1))?,
        }
        if job.components.len() > 1 || job.flexible.is_some() {
            job.runner = Runner::Coupled;
        }
    }
    let procs_per_resource = i.unwrap_or(1).max(1);
    let total_procs = t.unwrap_or(procs_per_resource.saturating_mul(r.unwrap_or(1))).max(1);
    // Memory per processor: per resource / its CPUs, or total / all CPUs; POSIX MemoryLimit
    // is per process (one process per component).
    let per_proc = res
        .individual_memory
        .map(|m| m.div_ceil(procs_per_resource))
        .or(res.total_memory.map(|m| m.div_ceil(total_procs)))
        .or(memory_limit.map(|m| m.div_ceil(procs_per_resource)));
    job.memory = per_proc.map(format_size);
    if job.cputime.is_none() {
        job.cputime = res.cputime.map(format_seconds);
    }
    if res.virtual_memory.is_some() && job.limits.virtual_memory.is_none() {
        job.limits.virtual_memory = res.virtual_memory.map(format_size);
    }
    job.requirements = res.req.build();
    Ok(job)
}
