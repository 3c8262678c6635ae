//! Count-min sketch (being written).
