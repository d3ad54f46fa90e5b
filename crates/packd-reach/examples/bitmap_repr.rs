//! Measures the in-memory bitmap representation packd uses (EWAH decoded into plain 64-bit
//! words) against roaring bitmaps, on a real `.bitmap`: decoding every commit bitmap, the
//! memory they take, OR-ing them all (what a query with many tips does), AND-NOT of two (the
//! set difference of every query) and counting bits.
//!
//! Usage: `cargo run --release -p packd-reach --example bitmap_repr -- REPO.git`

use packd_odb::{Repository, RepositoryOptions};
use packd_reach::bitmap::PackBitmap;
use packd_reach::ewah::Bitmap;
use roaring::RoaringBitmap;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: bitmap_repr REPO")?;
    let repo = Repository::open(std::path::Path::new(&path), &RepositoryOptions::default())?;
    let (storage, pack) = repo
        .objects()
        .packs_with_storage()
        .next()
        .ok_or("no pack")?;
    let bm = PackBitmap::open_for_pack(storage.as_ref(), pack)?.ok_or("no bitmap")?;
    let positions: Vec<u32> = bm.commit_positions().collect();
    println!(
        "{}: {} objects, {} commit bitmaps",
        bm.name(),
        bm.object_count(),
        positions.len()
    );

    let t = Instant::now();
    let words: Vec<Bitmap> = positions
        .iter()
        .map(|&p| bm.commit_bitmap(p).map(|b| b.expect("listed")))
        .collect::<Result<_, _>>()?;
    let decode = t.elapsed();
    let words_bytes: usize = words.iter().map(|b| b.words().len() * 8).sum();

    let t = Instant::now();
    let roars: Vec<RoaringBitmap> = words
        .iter()
        .map(|b| RoaringBitmap::from_sorted_iter(b.iter_ones().map(|i| i as u32)).unwrap())
        .collect();
    let convert = t.elapsed();
    let roar_bytes: usize = roars.iter().map(|r| r.serialized_size()).sum();

    let t = Instant::now();
    let mut or_words = Bitmap::new();
    for b in &words {
        or_words.or_assign(b);
    }
    let or_w = t.elapsed();
    let t = Instant::now();
    let mut or_roar = RoaringBitmap::new();
    for r in &roars {
        or_roar |= r;
    }
    let or_r = t.elapsed();
    assert_eq!(or_words.count_ones(), or_roar.len());

    // The difference of the two largest (a fetch: wanted minus had).
    let mut by_size: Vec<usize> = (0..words.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(words[i].count_ones()));
    let (a, b) = (by_size[0], by_size[1.min(by_size.len() - 1)]);
    let t = Instant::now();
    let mut diff_w = words[a].clone();
    diff_w.and_not_assign(&words[b]);
    let n_w = diff_w.count_ones();
    let and_not_w = t.elapsed();
    let t = Instant::now();
    let diff_r = &roars[a] - &roars[b];
    let n_r = diff_r.len();
    let and_not_r = t.elapsed();
    assert_eq!(n_w, n_r);

    println!("{:<28} {:>14} {:>14}", "", "plain words", "roaring");
    println!(
        "{:<28} {:>14} {:>14}",
        "memory of all bitmaps",
        format!("{:.1} MiB", words_bytes as f64 / (1 << 20) as f64),
        format!("{:.1} MiB", roar_bytes as f64 / (1 << 20) as f64)
    );
    println!(
        "{:<28} {:>14} {:>14}",
        "decode all (EWAH ->)",
        format!("{decode:.2?}"),
        format!("+{convert:.2?}")
    );
    println!(
        "{:<28} {:>14} {:>14}",
        "OR all",
        format!("{or_w:.2?}"),
        format!("{or_r:.2?}")
    );
    println!(
        "{:<28} {:>14} {:>14}",
        "AND-NOT + count (largest 2)",
        format!("{and_not_w:.2?}"),
        format!("{and_not_r:.2?}")
    );
    Ok(())
}
