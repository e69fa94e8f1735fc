//! `top`'s state and what each key does to it. No terminal here: plain unit-tested logic.

use std::borrow::Borrow;

use super::view::{CGROUP_COLUMNS, COLUMNS, Column, FrameView, NODE_COLUMNS, Row, sort_rows};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Tasks,
    Processes,
    Cgroups,
    Nodes,
}

impl View {
    pub fn title(self) -> &'static str {
        match self {
            Self::Tasks => "tasks",
            Self::Processes => "processes",
            Self::Cgroups => "cgroups",
            Self::Nodes => "nodes",
        }
    }

    pub fn columns(self) -> Vec<&'static str> {
        match self {
            Self::Tasks | Self::Processes => COLUMNS.iter().map(|c| c.title()).collect(),
            Self::Cgroups => CGROUP_COLUMNS.to_vec(),
            Self::Nodes => NODE_COLUMNS.to_vec(),
        }
    }

    /// The default sort: most scan time first (nodes: by number).
    fn default_sort(self) -> (usize, bool) {
        match self {
            Self::Tasks | Self::Processes => (2, true),
            Self::Cgroups => (2, true),
            Self::Nodes => (0, false),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// `s`: ← → choose the sort column, ↑ ↓ its direction, Enter/Esc done.
    Sort,
    /// `/` or `f`: typing a filter.
    Filter(String),
    Help,
    /// `i`: the hooks and why some are missing.
    Hooks,
}

/// A key, as the app sees it (the terminal layer translates crossterm's events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    Left,
    Right,
    Enter,
    Esc,
    Backspace,
    CtrlC,
    PageUp,
    PageDown,
    /// The terminal was resized: draw again, nothing else.
    Redraw,
}

#[derive(Clone, Debug, PartialEq)]
pub struct App {
    pub view: View,
    pub mode: Mode,
    pub sort_col: usize,
    pub sort_desc: bool,
    /// Selected row (index into the shown rows) and its key, kept across refreshes.
    pub selected: usize,
    pub selected_key: Option<u64>,
    /// Substring filter on the row's text cells.
    pub filter: String,
    pub paused: bool,
    /// Detail of the selected task or process (key).
    pub detail: Option<u64>,
    /// The activity window, seconds: a row active within it stays listed (`w` cycles it).
    pub window_s: u64,
    pub quit: bool,
}

impl Default for App {
    fn default() -> Self {
        let (sort_col, sort_desc) = View::Tasks.default_sort();
        Self {
            view: View::Tasks,
            mode: Mode::Normal,
            sort_col,
            sort_desc,
            selected: 0,
            selected_key: None,
            filter: String::new(),
            paused: false,
            detail: None,
            window_s: super::history::DEFAULT_WINDOW_S,
            quit: false,
        }
    }
}

/// `1`–`5`: quick sorts on the task and process tables.
const QUICK_SORTS: [Column; 5] = [
    Column::ScanPct,
    Column::HintRate,
    Column::MigrRate,
    Column::SkipRate,
    Column::Pid,
];

impl App {
    /// The task views' default sort where this kernel does not measure scan time.
    pub fn sort_busiest(&mut self, col: usize) {
        if matches!(self.view, View::Tasks | View::Processes) {
            self.sort_col = col;
            self.sort_desc = true;
        }
    }

    pub fn switch(&mut self, v: View) {
        if self.view != v {
            self.view = v;
            (self.sort_col, self.sort_desc) = v.default_sort();
            self.selected = 0;
            self.selected_key = None;
            self.detail = None;
        }
    }

    /// The rows of the current view, filtered and sorted.
    pub fn rows<'a>(&self, f: &'a FrameView) -> Vec<&'a Row> {
        let rows = match self.view {
            View::Tasks => &f.tasks,
            View::Processes => &f.processes,
            View::Cgroups => &f.cgroups,
            View::Nodes => &f.nodes,
        };
        let needle = self.filter.to_lowercase();
        // Names, not numbers: `/1` should not match every row with a 1 in a rate.
        let text_cols: &[usize] = match self.view {
            View::Tasks | View::Processes => &[0, 1, 14, 16],
            View::Cgroups => &[0],
            View::Nodes => &[0, 1],
        };
        // References, not copies: at 100 000 tasks a copy of every row per redraw costs more
        // than drawing the rows that fit.
        let mut rows: Vec<&Row> = rows
            .iter()
            .filter(|r| {
                needle.is_empty()
                    || text_cols
                        .iter()
                        .any(|&i| r.cell(i).to_lowercase().contains(&needle))
            })
            .collect();
        sort_rows(&mut rows, self.sort_col, self.sort_desc);
        rows
    }

    /// Keeps the selection on the same row across refreshes, else within bounds.
    pub fn reselect<R: Borrow<Row>>(&mut self, rows: &[R]) {
        if let Some(k) = self.selected_key
            && let Some(i) = rows.iter().position(|r| r.borrow().key == k)
        {
            self.selected = i;
        }
        self.selected = self.selected.min(rows.len().saturating_sub(1));
        self.selected_key = rows.get(self.selected).map(|r| r.borrow().key);
    }

    fn move_by<R: Borrow<Row>>(&mut self, d: isize, rows: &[R]) {
        if rows.is_empty() {
            return;
        }
        let i = (self.selected as isize + d).clamp(0, rows.len() as isize - 1) as usize;
        self.selected = i;
        self.selected_key = Some(rows[i].borrow().key);
    }

    pub fn key<R: Borrow<Row>>(&mut self, k: Key, rows: &[R]) {
        if k == Key::CtrlC {
            self.quit = true;
            return;
        }
        match self.mode.clone() {
            Mode::Filter(mut text) => match k {
                Key::Enter => {
                    self.filter = text;
                    self.mode = Mode::Normal;
                    self.selected = 0;
                }
                Key::Esc => self.mode = Mode::Normal,
                Key::Backspace => {
                    text.pop();
                    self.mode = Mode::Filter(text);
                }
                Key::Char(c) => {
                    text.push(c);
                    self.mode = Mode::Filter(text);
                }
                _ => {}
            },
            Mode::Sort => {
                let ncols = self.view.columns().len();
                match k {
                    Key::Left => self.sort_col = (self.sort_col + ncols - 1) % ncols,
                    Key::Right => self.sort_col = (self.sort_col + 1) % ncols,
                    Key::Up => self.sort_desc = false,
                    Key::Down => self.sort_desc = true,
                    Key::Enter | Key::Esc | Key::Char('s') => self.mode = Mode::Normal,
                    Key::Char('q') => self.quit = true,
                    _ => {}
                }
            }
            Mode::Help | Mode::Hooks => match k {
                Key::Char('q') => self.quit = true,
                _ => self.mode = Mode::Normal,
            },
            Mode::Normal => match k {
                Key::Char('q') => self.quit = true,
                Key::Up | Key::Char('k') => self.move_by(-1, rows),
                Key::Down | Key::Char('j') => self.move_by(1, rows),
                Key::PageUp => self.move_by(-10, rows),
                Key::PageDown => self.move_by(10, rows),
                Key::Enter => {
                    if matches!(self.view, View::Tasks | View::Processes) {
                        self.detail = rows.get(self.selected).map(|r| r.borrow().key);
                    }
                }
                Key::Esc | Key::Char('b') => {
                    if self.detail.is_some() {
                        self.detail = None;
                    } else {
                        self.filter.clear();
                    }
                }
                Key::Char('s') => self.mode = Mode::Sort,
                Key::Char('/') | Key::Char('f') => self.mode = Mode::Filter(self.filter.clone()),
                Key::Char('p') => self.paused = !self.paused,
                Key::Char('w') => self.window_s = super::history::next_window(self.window_s),
                Key::Char('t') => self.switch(View::Tasks),
                Key::Char('P') => self.switch(View::Processes),
                Key::Char('c') => self.switch(View::Cgroups),
                Key::Char('n') => self.switch(View::Nodes),
                Key::Char('?') | Key::Char('h') => self.mode = Mode::Help,
                Key::Char('i') => self.mode = Mode::Hooks,
                Key::Char(d @ '1'..='5') => {
                    if matches!(self.view, View::Tasks | View::Processes) {
                        let col = QUICK_SORTS[(d as u8 - b'1') as usize];
                        self.sort_col = COLUMNS.iter().position(|c| *c == col).unwrap_or(0);
                        // Rates largest first; PIDs in order.
                        self.sort_desc = col.numeric() && col != Column::Pid;
                    }
                }
                _ => {}
            },
        }
    }
}

pub const HELP: &[(&str, &str)] = &[
    ("↑ ↓ / j k, PgUp PgDn", "move"),
    ("Enter", "detail of the task or process"),
    ("Esc / b", "back (or clear the filter)"),
    ("s, then ← → / ↑ ↓", "sort column / ascending, descending"),
    ("1-5", "sort by SCAN%, HINT/s, MIGR/s, SKIP/s, PID"),
    ("/ or f", "filter rows by text (Enter applies, Esc cancels)"),
    ("p", "pause the screen (counting goes on)"),
    ("w", "activity window 5/10/30/60 s (rows active stay)"),
    ("t P c n", "tasks, processes, cgroups, nodes"),
    ("i", "hooks this kernel lacks, and why"),
    ("? h", "this help"),
    ("q / Ctrl-C", "quit"),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: u64) -> Vec<Row> {
        (0..n)
            .map(|k| Row {
                key: k + 100,
                cells: vec![format!("task{k}").into()],
                sort: vec![k as f64],
                ..Row::default()
            })
            .collect()
    }

    #[test]
    fn moving_stays_in_bounds_and_follows_the_key() {
        let r = rows(3);
        let mut a = App::default();
        a.key(Key::Up, &r);
        assert_eq!(a.selected, 0);
        a.key(Key::Down, &r);
        a.key(Key::Char('j'), &r);
        a.key(Key::Down, &r);
        assert_eq!(a.selected, 2);
        assert_eq!(a.selected_key, Some(102));
        // The same row moves to the top after a refresh: the selection follows it.
        let mut moved = r.clone();
        moved.rotate_right(1);
        a.reselect(&moved);
        assert_eq!(a.selected, 0);
        a.reselect(&rows(1));
        assert_eq!(a.selected, 0);
    }

    #[test]
    fn sort_mode_changes_column_and_direction() {
        let mut a = App::default();
        let r = rows(2);
        a.key(Key::Char('s'), &r);
        assert_eq!(a.mode, Mode::Sort);
        let before = a.sort_col;
        a.key(Key::Right, &r);
        assert_eq!(a.sort_col, before + 1);
        a.key(Key::Up, &r);
        assert!(!a.sort_desc);
        a.key(Key::Enter, &r);
        assert_eq!(a.mode, Mode::Normal);
        a.key(Key::Char('2'), &r);
        assert_eq!(COLUMNS[a.sort_col], Column::HintRate);
        assert!(a.sort_desc);
    }

    #[test]
    fn filter_views_pause_detail_and_quit() {
        let r = rows(3);
        let mut a = App::default();
        a.key(Key::Char('/'), &r);
        for c in "task1".chars() {
            a.key(Key::Char(c), &r);
        }
        a.key(Key::Backspace, &r);
        a.key(Key::Char('2'), &r);
        a.key(Key::Enter, &r);
        assert_eq!(a.filter, "task2");
        a.key(Key::Esc, &r);
        assert_eq!(a.filter, "", "Esc clears the filter");
        a.key(Key::Char('p'), &r);
        assert!(a.paused);
        assert_eq!(a.window_s, 10);
        for want in [30, 60, 5, 10] {
            a.key(Key::Char('w'), &r);
            assert_eq!(a.window_s, want);
        }
        a.key(Key::Enter, &r);
        assert_eq!(a.detail, Some(100));
        a.key(Key::Char('b'), &r);
        assert_eq!(a.detail, None);
        a.key(Key::Char('n'), &r);
        assert_eq!(a.view, View::Nodes);
        a.key(Key::Enter, &r);
        assert_eq!(a.detail, None, "no detail of a node");
        a.key(Key::Char('c'), &r);
        assert_eq!(a.view, View::Cgroups);
        a.key(Key::Char('?'), &r);
        assert_eq!(a.mode, Mode::Help);
        a.key(Key::Char('x'), &r);
        assert_eq!(a.mode, Mode::Normal);
        a.key(Key::Char('q'), &r);
        assert!(a.quit);
        let mut b = App::default();
        b.key(Key::Char('/'), &r);
        b.key(Key::CtrlC, &r);
        assert!(b.quit, "Ctrl-C quits from any mode");
    }
}
