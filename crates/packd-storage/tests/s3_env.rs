//! The S3 backend configured as a user configures it: from the usual AWS environment
//! variables, against a real server (see `tests/s3.rs`). A test binary of its own, with one
//! test, since it sets the process's environment.

use packd_storage::{S3Config, S3Storage, Storage};
use packd_test_s3::S3Server;
use std::io::Write;

#[test]
fn the_endpoint_region_and_keys_come_from_the_aws_variables() {
    let server = S3Server::start();
    server.create_bucket("from-env");
    // A plain-HTTP endpoint on this machine needs no AWS_ALLOW_HTTP.
    std::env::set_var("AWS_ENDPOINT_URL", server.endpoint());
    std::env::set_var("AWS_REGION", packd_test_s3::REGION);
    std::env::set_var("AWS_ACCESS_KEY_ID", server.access_key_id());
    std::env::set_var("AWS_SECRET_ACCESS_KEY", server.secret_access_key());
    let s = S3Storage::new(&S3Config::from_env("from-env", "repos/r.git/objects")).unwrap();
    let mut blob = s.create("pack/pack-1.idx").unwrap();
    blob.write_all(b"index bytes").unwrap();
    blob.publish().unwrap();
    assert_eq!(
        &s.open("pack/pack-1.idx").unwrap().read_all().unwrap()[..],
        b"index bytes"
    );
    assert_eq!(
        s.describe("pack/pack-1.idx"),
        "s3://from-env/repos/r.git/objects/pack/pack-1.idx"
    );
    assert!(server
        .bucket_dir("from-env")
        .join("repos/r.git/objects/pack/pack-1.idx")
        .is_file());

    // A wrong secret in the environment is refused by the server.
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "wrong");
    let wrong = S3Storage::new(&S3Config::from_env("from-env", "repos/r.git/objects")).unwrap();
    assert!(wrong.open("pack/pack-1.idx").is_err());
}
