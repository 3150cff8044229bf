//! The per-segment per-period IO counts of a trace, stored sparsely: only
//! cells with IO are kept, one column per period that had IO.

/// IO of one segment in one period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatrixCell {
    pub segment: u64,
    /// IO count (saturates at `u32::MAX`).
    pub io: u32,
    /// Write IO count (saturates at `u32::MAX`).
    pub writes: u32,
}

/// The cells of one period with IO, sorted by segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatrixColumn {
    pub period: u64,
    pub cells: Vec<MatrixCell>,
}

/// Segment × period IO counts. Columns are sorted by period; periods without
/// IO have no column.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IoMatrix {
    /// Rows: segments `0..segments`.
    pub segments: u64,
    /// Columns: periods `0..periods`.
    pub periods: u64,
    pub segment_bytes: u64,
    pub period_ns: u64,
    pub columns: Vec<MatrixColumn>,
}

impl IoMatrix {
    /// IO of `segment` in `period` (0 when absent).
    pub fn io(&self, segment: u64, period: u64) -> u32 {
        let Ok(column) = self
            .columns
            .binary_search_by_key(&period, |column| column.period)
        else {
            return 0;
        };
        let cells = &self.columns[column].cells;
        match cells.binary_search_by_key(&segment, |cell| cell.segment) {
            Ok(index) => cells[index].io,
            Err(_) => 0,
        }
    }

    /// Every cell with IO, with its period, in period then segment order.
    pub fn cells(&self) -> impl Iterator<Item = (u64, &MatrixCell)> {
        self.columns
            .iter()
            .flat_map(|column| column.cells.iter().map(move |cell| (column.period, cell)))
    }

    /// Largest IO of any cell (0 for an empty matrix).
    pub fn max_io(&self) -> u32 {
        self.cells().map(|(_, cell)| cell.io).max().unwrap_or(0)
    }

    /// Number of cells with IO.
    pub fn cell_count(&self) -> usize {
        self.columns.iter().map(|column| column.cells.len()).sum()
    }
}
