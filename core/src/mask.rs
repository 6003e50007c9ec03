//! RFC 6455 §5.3 client-to-server masking, a 64-bit word at a time.

/// XORs `buf` with the 4-byte `key`, as if `buf` started `offset` bytes into the masked
/// payload. Masking twice with the same key and offset restores the input.
pub fn apply_mask(buf: &mut [u8], key: [u8; 4], offset: usize) {
    let rot = offset % 4;
    let k = [
        key[rot],
        key[(rot + 1) % 4],
        key[(rot + 2) % 4],
        key[(rot + 3) % 4],
    ];
    let word = u64::from_ne_bytes([k[0], k[1], k[2], k[3], k[0], k[1], k[2], k[3]]);
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let masked =
            u64::from_ne_bytes(chunk.try_into().expect("chunks_exact yields 8 bytes")) ^ word;
        chunk.copy_from_slice(&masked.to_ne_bytes());
    }
    // Whole words are multiples of 4 bytes, so the tail restarts at key index 0.
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= k[i % 4];
    }
}

/// Copies `src` into `dst` (same length) masked with `key` from offset 0: one pass, no
/// separate copy.
pub(crate) fn copy_masked(dst: &mut [u8], src: &[u8], key: [u8; 4]) {
    assert_eq!(dst.len(), src.len(), "copy_masked needs equal lengths");
    let word = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (dc, sc) in (&mut d).zip(&mut s) {
        let masked = u64::from_ne_bytes(sc.try_into().expect("chunks_exact yields 8 bytes")) ^ word;
        dc.copy_from_slice(&masked.to_ne_bytes());
    }
    for (i, (db, sb)) in d.into_remainder().iter_mut().zip(s.remainder()).enumerate() {
        *db = sb ^ key[i % 4];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(buf: &mut [u8], key: [u8; 4], offset: usize) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b ^= key[(i + offset) % 4];
        }
    }

    #[test]
    fn matches_bytewise_masking_for_every_length_and_offset() {
        let key = [0x37, 0xfa, 0x21, 0x3d];
        for len in 0..70 {
            for offset in 0..8 {
                let input: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
                let mut fast = input.clone();
                let mut slow = input.clone();
                apply_mask(&mut fast, key, offset);
                naive(&mut slow, key, offset);
                assert_eq!(fast, slow, "len {len} offset {offset}");
                apply_mask(&mut fast, key, offset);
                assert_eq!(fast, input, "round trip len {len} offset {offset}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn masking_round_trips_for_any_length_key_and_offset(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..20_000),
            key in proptest::prelude::any::<[u8; 4]>(),
            offset in 0usize..64,
        ) {
            let mut fast = data.clone();
            apply_mask(&mut fast, key, offset);
            let mut slow = data.clone();
            naive(&mut slow, key, offset);
            proptest::prop_assert_eq!(&fast, &slow);
            apply_mask(&mut fast, key, offset);
            proptest::prop_assert_eq!(fast, data);
        }
    }

    #[test]
    fn rfc_example_hello() {
        // RFC 6455 §5.7: masked "Hello" with key 37 fa 21 3d.
        let mut data = *b"Hello";
        apply_mask(&mut data, [0x37, 0xfa, 0x21, 0x3d], 0);
        assert_eq!(data, [0x7f, 0x9f, 0x4d, 0x51, 0x58]);
    }

    #[test]
    fn copy_masked_equals_apply_mask() {
        let key = [1, 2, 3, 250];
        for len in 0..40 {
            let src: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut dst = vec![0; len];
            copy_masked(&mut dst, &src, key);
            let mut expect = src.clone();
            apply_mask(&mut expect, key, 0);
            assert_eq!(dst, expect);
        }
    }
}
