//! The host variables of GridWay's REQUIREMENTS and RANK (GridWay 5 user guide, "Requirement and
//! rank variables") and the functions of 004 §3.2, resolved to enums at compile time.

use std::fmt;

macro_rules! var_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident => $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($(#[$vm])* $v,)* }

        impl $name {
            /// Every variable, in declaration order (the index is `var as usize`).
            pub const ALL: &'static [$name] = &[$($name::$v,)*];
            /// Number of variables of this kind.
            pub const COUNT: usize = $name::ALL.len();

            /// The name as written in an expression (upper case).
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }

            /// Looks a name up, ignoring ASCII case.
            pub fn from_name(s: &str) -> Option<Self> {
                $name::ALL.iter().copied().find(|v| v.name().eq_ignore_ascii_case(s))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

var_enum! {
    /// Numeric host variables. koalesce maps a site onto GridWay's host + queue: one queue per
    /// site, the site's processors are its nodes.
    IntVar {
        /// CPU speed in MHz.
        CpuMhz => "CPU_MHZ",
        /// Percentage of free CPU (idle processors / processors × 100).
        CpuFree => "CPU_FREE",
        /// Processors per node.
        CpuSmp => "CPU_SMP",
        /// Total nodes (processors) of the site.
        NodeCount => "NODECOUNT",
        /// Total memory in MB.
        SizeMemMb => "SIZE_MEM_MB",
        /// Free memory in MB.
        FreeMemMb => "FREE_MEM_MB",
        /// Total disk space in MB.
        SizeDiskMb => "SIZE_DISK_MB",
        /// Free disk space in MB.
        FreeDiskMb => "FREE_DISK_MB",
        /// Total node count of the queue.
        QueueNodeCount => "QUEUE_NODECOUNT",
        /// Free node count of the queue (idle processors usable by grid jobs).
        QueueFreeNodeCount => "QUEUE_FREENODECOUNT",
        /// Maximum wall time of jobs in the queue (minutes, 0 = none).
        QueueMaxTime => "QUEUE_MAXTIME",
        /// Maximum CPU time of jobs in the queue (minutes, 0 = none).
        QueueMaxCpuTime => "QUEUE_MAXCPUTIME",
        /// Maximum processors in one request.
        QueueMaxCount => "QUEUE_MAXCOUNT",
        /// Maximum running jobs in the queue.
        QueueMaxRunningJobs => "QUEUE_MAXRUNNINGJOBS",
        /// Maximum queued jobs in the queue.
        QueueMaxJobsInQueue => "QUEUE_MAXJOBSINQUEUE",
        /// Priority of the queue.
        QueuePriority => "QUEUE_PRIORITY",
    }
}

var_enum! {
    /// String host variables, compared with shell wildcard patterns (`*`, `?`, `[...]`).
    StrVar {
        /// The site's name (GridWay: the host's FQDN).
        Hostname => "HOSTNAME",
        /// Architecture, e.g. "x86_64".
        Arch => "ARCH",
        /// Operating system name, e.g. "Linux".
        OsName => "OS_NAME",
        /// Operating system version.
        OsVersion => "OS_VERSION",
        /// CPU model.
        CpuModel => "CPU_MODEL",
        /// Name of the local resource manager, e.g. "slurm", "local".
        LrmsName => "LRMS_NAME",
        /// Type of the local resource manager.
        LrmsType => "LRMS_TYPE",
        /// Name of the queue (koalesce: the site's grid partition).
        QueueName => "QUEUE_NAME",
        /// Dispatch type of the queue ("batch", "immediate").
        QueueDispatchType => "QUEUE_DISPATCHTYPE",
        /// Status of the queue ("active", ...).
        QueueStatus => "QUEUE_STATUS",
        /// Name of the fork job manager (GridWay's FORK_NAME).
        ForkName => "FORK_NAME",
    }
}

/// The functions an expression may call, each with one string argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    /// 004 §3.2: true when a close storage element (the site's own storage) holds the file.
    CloseData,
    /// 004 §3.2: 1 when a close storage element holds the file, else 0.
    HasCloseData,
    /// 004 §3.2: the file's size in kilobytes (1000 bytes) when a close storage element holds
    /// it, else 0 (Table 3's ranks fit kB).
    SizeCloseData,
    /// koalesce: true when the site publishes this software / runtime environment tag
    /// (xRSL's runTimeEnvironment).
    HasSoftware,
    /// koalesce: true when the site publishes this feature (Slurm's node features, which
    /// `sbatch --constraint` asks for; compared ignoring ASCII case).
    HasFeature,
}

/// How a feature asked about by `HAS_FEATURE` is kept among the tags an expression names
/// ([`super::Compiled::software`]): behind this prefix, which no software tag of a site can
/// carry (a NUL), so software and features never answer for each other.
pub const FEATURE_TAG_PREFIX: &str = "\u{0}feature:";

impl Function {
    pub const ALL: [Function; 5] = [
        Function::CloseData,
        Function::HasCloseData,
        Function::SizeCloseData,
        Function::HasSoftware,
        Function::HasFeature,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Function::CloseData => "CLOSE_DATA",
            Function::HasCloseData => "HAS_CLOSE_DATA",
            Function::SizeCloseData => "SIZE_CLOSE_DATA",
            Function::HasSoftware => "HAS_SOFTWARE",
            Function::HasFeature => "HAS_FEATURE",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Function::ALL.into_iter().find(|f| f.name().eq_ignore_ascii_case(s))
    }
}

/// A variable reference resolved at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    Int(IntVar),
    Str(StrVar),
}

impl Var {
    pub fn from_name(s: &str) -> Option<Var> {
        IntVar::from_name(s).map(Var::Int).or_else(|| StrVar::from_name(s).map(Var::Str))
    }

    pub fn name(self) -> &'static str {
        match self {
            Var::Int(v) => v.name(),
            Var::Str(v) => v.name(),
        }
    }

    /// Variables that change as processors are taken or freed (the caller must refresh them
    /// during a scan); the others describe the site and stay fixed.
    pub fn is_load_dependent(self) -> bool {
        matches!(
            self,
            Var::Int(IntVar::CpuFree | IntVar::FreeMemMb | IntVar::FreeDiskMb | IntVar::QueueFreeNodeCount)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_ignore_case() {
        for v in IntVar::ALL {
            assert_eq!(IntVar::from_name(v.name()), Some(*v));
        }
        for v in StrVar::ALL {
            assert_eq!(StrVar::from_name(&v.name().to_lowercase()), Some(*v));
        }
        assert_eq!(Var::from_name("cpu_mhz"), Some(Var::Int(IntVar::CpuMhz)));
        assert_eq!(Var::from_name("NOPE"), None);
        assert_eq!(Function::from_name("size_close_data"), Some(Function::SizeCloseData));
    }
}
