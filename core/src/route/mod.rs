//! Routing of complete messages (WebSocket text or CRLF lines): head-scan classification into
//! data and endpoint responses, and correlation of responses with our requests.

mod classify;
mod head_layout;
mod head_scan;
mod head_shape;
mod pending;
mod router;
mod rules;

pub use classify::{classify, Class, Classifier, Extracted, ResponseId};
pub(crate) use classify::{head_str, top_level_int, ByShape, Verdict};
pub(crate) use head_shape::{Fitted, HeadShapes, ShapeFit};
pub use pending::{PendingRequests, RequestHandle, RequestId};
pub use router::{IdStyle, Routed, Router, RouterConfig, TimedOut};
pub use rules::{Condition, RouteRules, MAX_EXTRACT_KEYS};
