//! The search's order, depth, cycles, determinism and window memory.

use super::*;
use packd_odb::{ObjectId, ObjectKind};

/// Version `v` of a file of `lines` lines: each version changes a few lines of the one before.
fn version(seed: u32, v: u32, lines: u32) -> Vec<u8> {
    let mut out = Vec::new();
    for line in 0..lines {
        let changed = (0..=v)
            .filter(|k| (line * 7 + k * 13 + seed).is_multiple_of(41))
            .count();
        out.extend_from_slice(format!("line {line} of file {seed}: edit {changed}\n").as_bytes());
    }
    out
}

struct Objects {
    candidates: Vec<Candidate>,
    data: Vec<Bytes>,
}

use bytes::Bytes;

/// `files` paths with `versions` versions each, in a shuffled caller order.
fn objects(files: u32, versions: u32) -> Objects {
    let mut candidates = Vec::new();
    let mut data = Vec::new();
    for f in 0..files {
        for v in 0..versions {
            let bytes = version(f, v, 60 + f % 5 * 20);
            let mut id = [0u8; 20];
            id[..4].copy_from_slice(&f.to_be_bytes());
            id[4..8].copy_from_slice(&v.to_be_bytes());
            candidates.push(Candidate {
                id: ObjectId::from_bytes(&id).unwrap(),
                kind: ObjectKind::Blob,
                size: bytes.len() as u64,
                name_hash: f.wrapping_mul(2_654_435_761) | 1,
                base_only: false,
                base_depth: 0,
                above: 0,
            });
            data.push(Bytes::from(bytes));
        }
    }
    // A deterministic shuffle of the caller's order.
    let n = candidates.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (i * 7919) % n);
    Objects {
        candidates: order.iter().map(|&i| candidates[i].clone()).collect(),
        data: order.iter().map(|&i| data[i].clone()).collect(),
    }
}

fn run(objects: &Objects, options: &SearchOptions) -> Vec<Choice> {
    let load = |i: u32| Ok::<_, std::convert::Infallible>(objects.data[i as usize].clone());
    search(&objects.candidates, options, &load, &|_| {}).unwrap()
}

/// Every delta applies to its base to give its target; returns the depth of each.
fn check(objects: &Objects, choices: &[Choice], max_depth: u32) -> Vec<u32> {
    let mut depths = vec![u32::MAX; choices.len()];
    fn depth_of(i: usize, choices: &[Choice], depths: &mut [u32], seen: &mut Vec<usize>) -> u32 {
        if depths[i] != u32::MAX {
            return depths[i];
        }
        assert!(!seen.contains(&i), "a cycle through {i}");
        seen.push(i);
        let d = match &choices[i] {
            Choice::Whole => 0,
            Choice::Delta { base, .. } => 1 + depth_of(*base as usize, choices, depths, seen),
        };
        depths[i] = d;
        d
    }
    for i in 0..choices.len() {
        let d = depth_of(i, choices, &mut depths, &mut Vec::new());
        assert!(d <= max_depth, "{i} is {d} deep, more than {max_depth}");
        if let Choice::Delta {
            base,
            depth,
            delta_size,
            compressed,
        } = &choices[i]
        {
            assert_eq!(*depth, d, "the depth reported for {i}");
            assert_eq!(
                objects.candidates[*base as usize].kind,
                objects.candidates[i].kind
            );
            let mut delta = vec![0u8; *delta_size as usize];
            let n = libdeflater::Decompressor::new()
                .zlib_decompress(compressed, &mut delta)
                .unwrap();
            assert_eq!(n as u64, *delta_size);
            let base = &objects.data[*base as usize];
            assert_eq!(
                packd_odb::delta::apply(base, &delta).unwrap(),
                objects.data[i]
            );
        }
    }
    depths
}

#[test]
fn versions_of_a_path_become_deltas_within_the_depth() {
    let objects = objects(6, 12);
    let choices = run(&objects, &SearchOptions::default());
    let depths = check(&objects, &choices, 50);
    let deltas = depths.iter().filter(|&&d| d > 0).count();
    // One whole version per path at least, nearly all others deltas.
    assert!(deltas >= 6 * 11 - 2, "{deltas} deltas");
    // Deltas are against versions of the same path.
    for (i, choice) in choices.iter().enumerate() {
        if let Choice::Delta { base, .. } = choice {
            assert_eq!(
                objects.candidates[*base as usize].name_hash,
                objects.candidates[i].name_hash
            );
        }
    }
}

#[test]
fn depth_is_respected() {
    let objects = objects(2, 30);
    for depth in [1, 2, 3] {
        let options = SearchOptions {
            depth,
            ..SearchOptions::default()
        };
        let choices = run(&objects, &options);
        let depths = check(&objects, &choices, depth);
        assert_eq!(depths.iter().copied().max(), Some(depth), "depth {depth}");
    }
}

#[test]
fn the_answer_is_the_same_on_any_number_of_threads() {
    // Enough objects for several chunks.
    let objects = objects(60, 40);
    let one = run(
        &objects,
        &SearchOptions {
            threads: 1,
            ..SearchOptions::default()
        },
    );
    check(&objects, &one, 50);
    assert!(
        one.iter()
            .filter(|c| matches!(c, Choice::Delta { .. }))
            .count()
            > 2000
    );
    for threads in [2, 3] {
        let many = run(
            &objects,
            &SearchOptions {
                threads,
                ..SearchOptions::default()
            },
        );
        assert!(one == many, "{threads} threads differ from one");
    }
}

#[test]
fn the_window_is_ordered_as_git_orders_it() {
    let mut objects = objects(3, 2);
    objects.candidates[0].kind = ObjectKind::Tree;
    let all: Vec<u32> = (0..objects.candidates.len() as u32).collect();
    let ordered = order::window_order(&objects.candidates, all, true);
    let key = |i: &u32| {
        let c = &objects.candidates[*i as usize];
        (
            std::cmp::Reverse(c.kind as u8),
            std::cmp::Reverse(c.name_hash),
            std::cmp::Reverse(c.size),
            *i,
        )
    };
    let mut expected = ordered.clone();
    expected.sort_by_key(key);
    assert_eq!(ordered, expected);
    // Blobs (3) before trees (2); larger first within a path.
    assert_eq!(
        objects.candidates[*ordered.last().unwrap() as usize].kind,
        ObjectKind::Tree
    );
}

#[test]
fn chunks_are_cut_where_the_name_hash_changes() {
    let objects = objects(40, 7);
    let all: Vec<u32> = (0..objects.candidates.len() as u32).collect();
    let ordered = order::window_order(&objects.candidates, all, true);
    let chunks = order::chunks(&objects.candidates, &ordered, 10);
    assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), ordered.len());
    for pair in chunks.windows(2) {
        let last = &objects.candidates[*pair[0].last().unwrap() as usize];
        let first = &objects.candidates[pair[1][0] as usize];
        assert_ne!(last.name_hash, first.name_hash);
        assert!(pair[0].len() >= 10);
    }
}

#[test]
fn window_memory_limits_the_bases_tried() {
    // One path's versions. With room for one object the window keeps only the base of the
    // last delta (it moves up to the newest place), so every version is tried against the
    // first, largest one alone; without a limit most find a closer version.
    let objects = objects(1, 12);
    let bases = |options: &SearchOptions| {
        let choices = run(&objects, options);
        check(&objects, &choices, options.depth);
        let mut bases: Vec<u32> = choices
            .iter()
            .filter_map(|c| match c {
                Choice::Delta { base, .. } => Some(*base),
                Choice::Whole => None,
            })
            .collect();
        let deltas = bases.len();
        bases.sort_unstable();
        bases.dedup();
        (deltas, bases.len())
    };
    let unlimited = bases(&SearchOptions::default());
    let limited = bases(&SearchOptions {
        window_memory: 1,
        ..SearchOptions::default()
    });
    assert_eq!(limited, (11, 1));
    assert_eq!(unlimited.0, 11);
    assert!(unlimited.1 > 1, "{unlimited:?}");
}

#[test]
fn base_only_objects_are_bases_and_never_deltas() {
    let mut objects = objects(3, 4);
    for c in objects.candidates.iter_mut().step_by(2) {
        c.base_only = true;
    }
    let choices = run(&objects, &SearchOptions::default());
    check(&objects, &choices, 50);
    let mut against_base_only = 0;
    for (i, choice) in choices.iter().enumerate() {
        if let Choice::Delta { base, .. } = choice {
            assert!(!objects.candidates[i].base_only);
            against_base_only += usize::from(objects.candidates[*base as usize].base_only);
        }
    }
    assert!(against_base_only > 0);
    let order = write_order(&objects.candidates, &choices);
    assert_eq!(order.len(), 6);
}

#[test]
fn a_past_deadline_leaves_everything_whole_and_tiny_objects_are_whole() {
    let objects = objects(3, 4);
    let done = AtomicU64::new(0);
    let load = |i: u32| Ok::<_, ()>(objects.data[i as usize].clone());
    let options = SearchOptions {
        deadline: Some(Instant::now()),
        ..SearchOptions::default()
    };
    let choices = search(&objects.candidates, &options, &load, &|n| {
        done.fetch_max(n, Ordering::Relaxed);
    })
    .unwrap();
    assert!(choices.iter().all(|c| *c == Choice::Whole));
    assert_eq!(done.load(Ordering::Relaxed), 12);
    let tiny: Vec<Candidate> = (0..4)
        .map(|i| Candidate {
            size: 49,
            ..objects.candidates[i].clone()
        })
        .collect();
    let same = Bytes::from(vec![b'x'; 49]);
    let choices = search(
        &tiny,
        &SearchOptions::default(),
        &|_| Ok::<_, ()>(same.clone()),
        &|_| {},
    )
    .unwrap();
    assert!(choices.iter().all(|c| *c == Choice::Whole));
}

#[test]
fn a_load_error_ends_the_search() {
    let objects = objects(2, 3);
    let result = search(
        &objects.candidates,
        &SearchOptions::default(),
        &|i| {
            if i == 3 {
                Err(i)
            } else {
                Ok(objects.data[i as usize].clone())
            }
        },
        &|_| {},
    );
    assert_eq!(result.unwrap_err(), 3);
}

#[test]
fn a_writers_order_is_kept() {
    // Only earlier candidates may be bases: every delta's base comes before it.
    let objects = objects(4, 10);
    let load = |i: u32| Ok::<_, ()>(objects.data[i as usize].clone());
    let choices = search_where(
        &objects.candidates,
        &SearchOptions::default(),
        &load,
        &|_| {},
        &|target, base| base < target,
    )
    .unwrap();
    check(&objects, &choices, 50);
    let mut deltas = 0;
    for (i, choice) in choices.iter().enumerate() {
        if let Choice::Delta { base, .. } = choice {
            assert!((*base as usize) < i, "{i} against {base}");
            deltas += 1;
        }
    }
    assert!(deltas > 20, "{deltas} deltas");
}

#[test]
fn chains_resting_on_a_candidate_and_under_a_base_count_toward_the_depth() {
    // Every candidate already carries a chain of 2 (reused deltas resting on it): with depth
    // 3, its own chain may be 1 long at most.
    let mut resting = objects(2, 20);
    for c in resting.candidates.iter_mut() {
        c.above = 2;
    }
    let choices = run(
        &resting,
        &SearchOptions {
            depth: 3,
            ..SearchOptions::default()
        },
    );
    let depths = check(&resting, &choices, 1);
    assert!(depths.contains(&1), "some deltas are made");
    // Base-only candidates ending chains at the full depth are never bases; ten levels less,
    // they are, and their deltas are one deeper.
    for (base_depth, used) in [(50, false), (40, true)] {
        let mut objects = objects(3, 6);
        for c in objects.candidates.iter_mut().step_by(2) {
            c.base_only = true;
            c.base_depth = base_depth;
        }
        let choices = run(&objects, &SearchOptions::default());
        let mut against_base_only = 0;
        for choice in &choices {
            if let Choice::Delta { base, depth, .. } = choice {
                if objects.candidates[*base as usize].base_only {
                    against_base_only += 1;
                    assert_eq!(*depth, base_depth + 1);
                }
            }
        }
        assert_eq!(against_base_only > 0, used, "base depth {base_depth}");
    }
}
