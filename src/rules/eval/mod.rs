//! Evaluation of rule conditions over in-memory windows of the stored history.

pub mod column;
pub mod expr;
pub mod needs;
pub mod series;
pub mod stats;
pub mod suffix;
pub mod window;
pub mod world;
