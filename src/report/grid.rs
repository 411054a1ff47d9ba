//! Table cells and their rendering: the one grid both the terminal summary
//! and the why block draw with (HTML renders the same [`Rows`]).
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

/// Rows of cells, with their header: what the terminal and HTML tables show.
pub struct Rows {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

pub(super) fn new_table(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    t
}

pub(super) fn right_align(t: &mut Table, from: usize) {
    let n = t.column_count();
    for i in from..n {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// As [`render`], wrapping long cells to keep the table within `width` columns.
pub(super) fn render_within(rows: &Rows, right_from: usize, width: u16) -> String {
    let mut t = filled(rows, right_from);
    t.set_content_arrangement(comfy_table::ContentArrangement::Dynamic).set_width(width);
    format!("{t}\n")
}

/// The rows as a terminal table, right-aligned from column `right_from`.
pub(super) fn render(rows: &Rows, right_from: usize) -> String {
    format!("{}\n", filled(rows, right_from))
}

fn filled(rows: &Rows, right_from: usize) -> Table {
    let mut t = new_table(rows.header.iter().map(String::as_str).collect());
    for row in &rows.rows {
        t.add_row(row.clone());
    }
    right_align(&mut t, right_from);
    t
}
