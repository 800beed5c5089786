// `sqlx::migrate!` embeds the migration files at compile time but cannot tell Cargo about a
// new file; this makes adding one rebuild the crate (sqlx's own advice).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
