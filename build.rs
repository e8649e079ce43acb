// The migrations are embedded at compile time (`sqlx::migrate!`): rebuild when they change.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
