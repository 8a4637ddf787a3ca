//! JPEG decoding of phone-sized photos: the decoders within reach, at full size and at the
//! DCT scales the detection plan asks for, one core each.
//!
//! `cargo run --release -p face-engine --example decoders -- [--runs N]`
//!
//! Photos are built as in `phone_photos` (a demo photo on a plain background, baseline JPEG at
//! quality 90); the engine's own path (`image_io::decode_scaled`) is timed beside the bare
//! decoders, so what it adds (orientation, conversion) shows.

use std::io::Cursor;
use std::path::Path;
use std::time::Instant;

use face_engine::image_io;
use face_engine::testing::phone;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs = args.iter().position(|a| a == "--runs").map(|i| args[i + 1].parse::<usize>().expect("a number")).unwrap_or(5);
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../node_modules/@vladmandic/face-api/demo/sample1.jpg");
    let source = image::open(demo).expect("demo photo").into_rgb8();
    println!("| photo | decoder | scale | ms (median of {runs}) | ns per stored pixel |");
    println!("|---|---|---|---|---|");
    for (label, w, h) in [("12 MP", 3024u32, 4032u32), ("24 MP", 4000, 6000), ("48 MP", 6000, 8000)] {
        let built = phone::group(&source, &[], w, h, 0.9, 7);
        let bytes = phone::jpeg(&built.photo, 90, 1);
        let header = image_io::inspect(&bytes, &image_io::DecodeLimits::pixels(u64::MAX)).expect("header");
        let pixels = (w * h) as f64;
        let report = |name: &str, scale: &str, f: &mut dyn FnMut()| {
            f();
            let mut times: Vec<f64> = (0..runs)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let m = times[times.len() / 2];
            println!("| {label} | {name} | {scale} | {:.0} | {:.1} |", m * 1000.0, m * 1e9 / pixels);
        };
        report("zune-jpeg (image crate)", "1", &mut || {
            image::load_from_memory_with_format(&bytes, image::ImageFormat::Jpeg).unwrap();
        });
        report("jpeg-decoder", "1", &mut || {
            jpeg_decoder::Decoder::new(Cursor::new(&bytes)).decode().unwrap();
        });
        for d in [2u16, 4] {
            report("jpeg-decoder", &format!("1/{d}"), &mut || {
                let mut dec = jpeg_decoder::Decoder::new(Cursor::new(&bytes));
                dec.scale((w / d as u32) as u16, (h / d as u32) as u16).unwrap();
                dec.decode().unwrap();
            });
        }
        for d in [1u32, 2] {
            report("engine (decode_scaled)", &format!("1/{d}"), &mut || {
                image_io::decode_scaled(&bytes, &header, d, u64::MAX).unwrap();
            });
        }
    }
}
