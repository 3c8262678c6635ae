//! Why the live router could not start, or could not write its reports.

use std::io;

use super::lock::LockError;
use super::privileges::PrivilegeError;
use crate::chain::ChainError;
use crate::io::socket::PortError;
use crate::io::xdp::XdpError;
use crate::peer::PeeringError;

/// An error of the live router ([`Router`](super::Router)). Each says what
/// is at fault (a key of the configuration, an interface, a file); the
/// wrapped errors keep their own messages and sources.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// `workers.cores` names a core this process may not run on.
    #[error(
        "workers.cores[{index}]: core {core} is not available to this process (have {available:?})"
    )]
    Core {
        /// The index in `workers.cores`.
        index: usize,
        /// The core asked for.
        core: usize,
        /// The cores the process may use.
        available: Vec<usize>,
    },
    /// An interface is another router's (see [`super::lock`]).
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Interface `index` could not be found.
    #[error("interfaces[{index}].name")]
    Interface {
        /// The port.
        index: usize,
        /// Why.
        #[source]
        err: PortError,
    },
    /// A port could not be opened (pnet or ring backend).
    #[error(transparent)]
    Port(#[from] PortError),
    /// The AF_XDP backend was refused (and no fallback asked for).
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// The capabilities could not be dropped.
    #[error(transparent)]
    Privileges(#[from] PrivilegeError),
    /// A worker's chain could not be built.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The peering settings were refused.
    #[error(transparent)]
    Peering(#[from] PeeringError),
    /// A thread could not be started.
    #[error("cannot start the {name} thread: {err}")]
    Thread {
        /// The thread's name.
        name: &'static str,
        /// Why.
        err: io::Error,
    },
    /// The heavy-flow report file could not be created.
    #[error("heavy.report: cannot create {dest}: {err}")]
    HeavyReport {
        /// The path.
        dest: String,
        /// Why.
        err: io::Error,
    },
    /// The IPFIX exporter could not be set up.
    #[error("heavy.ipfix: cannot export to {to}: {err}")]
    Ipfix {
        /// The collector.
        to: String,
        /// Why.
        err: io::Error,
    },
    /// Writing the heavy-flow reports failed.
    #[error(transparent)]
    Report(#[from] io::Error),
}
