//! Bloom filters (being written).
