//! Geometry between the photo and the small square crops the face models look at.
//!
//! Recognition works best when every face is presented the same way: eyes level, the same size,
//! at the same place in the crop. A similarity transform (rotation, uniform scale, translation;
//! no shear, so faces are not distorted) is fitted by least squares from the detected keypoints
//! to a canonical template, and the crop is filled by sampling the photo through its inverse.

use image::RgbImage;

/// A 2-D affine map `(x, y) -> (a*x + b*y + c, d*x + e*y + f)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Affine {
    pub a: f32,
    pub b: f32,
    pub c: f32,
    pub d: f32,
    pub e: f32,
    pub f: f32,
}

impl Affine {
    pub const IDENTITY: Affine = Affine { a: 1.0, b: 0.0, c: 0.0, d: 0.0, e: 1.0, f: 0.0 };

    #[inline]
    pub fn apply(&self, x: f32, y: f32) -> (f32, f32) {
        (self.a * x + self.b * y + self.c, self.d * x + self.e * y + self.f)
    }

    /// Inverse map, or `None` when the map collapses the plane.
    pub fn inverse(&self) -> Option<Affine> {
        let det = self.a * self.e - self.b * self.d;
        if det.abs() < 1e-12 || !det.is_finite() {
            return None;
        }
        let inv = 1.0 / det;
        let (a, b, d, e) = (self.e * inv, -self.b * inv, -self.d * inv, self.a * inv);
        Some(Affine { a, b, c: -(a * self.c + b * self.f), d, e, f: -(d * self.c + e * self.f) })
    }

    /// Uniform scale factor of a similarity transform.
    pub fn scale(&self) -> f32 {
        (self.a * self.e - self.b * self.d).abs().sqrt()
    }
}

/// Least-squares similarity transform taking each `src[i]` as close as possible to `dst[i]`.
///
/// Closed form for the 4-parameter model `x' = s*cos*x - s*sin*y + tx`, `y' = s*sin*x +
/// s*cos*y + ty`: centre both point sets, then the best rotation-scale is the ratio of the
/// cross-covariance to the source variance. Needs at least two distinct source points.
pub fn similarity_transform(src: &[(f32, f32)], dst: &[(f32, f32)]) -> Option<Affine> {
    let n = src.len();
    if n < 2 || n != dst.len() {
        return None;
    }
    let mean = |pts: &[(f32, f32)]| {
        let (sx, sy) = pts.iter().fold((0f64, 0f64), |(ax, ay), &(x, y)| (ax + x as f64, ay + y as f64));
        (sx / n as f64, sy / n as f64)
    };
    let (mx, my) = mean(src);
    let (nx, ny) = mean(dst);
    let (mut var, mut p, mut q) = (0f64, 0f64, 0f64);
    for (&(x, y), &(u, v)) in src.iter().zip(dst) {
        let (x, y) = (x as f64 - mx, y as f64 - my);
        let (u, v) = (u as f64 - nx, v as f64 - ny);
        var += x * x + y * y;
        p += x * u + y * v; // s*cos component
        q += x * v - y * u; // s*sin component
    }
    if var < 1e-12 {
        return None;
    }
    let (sc, ss) = (p / var, q / var);
    let tx = nx - (sc * mx - ss * my);
    let ty = ny - (ss * mx + sc * my);
    Some(Affine { a: sc as f32, b: -ss as f32, c: tx as f32, d: ss as f32, e: sc as f32, f: ty as f32 })
}

/// Transform that maps a square of side `side` centred at (`cx`, `cy`) in the photo onto an
/// `out` x `out` crop, upright.
pub fn square_crop_transform(cx: f32, cy: f32, side: f32, out: u32) -> Affine {
    let s = out as f32 / side.max(1e-3);
    Affine { a: s, b: 0.0, c: -(cx - side / 2.0) * s, d: 0.0, e: s, f: -(cy - side / 2.0) * s }
}

/// Renders a `width` x `height` RGB crop of `img` through `photo_to_crop` by bilinear
/// sampling. Pixels falling outside the photo take the nearest edge pixel, which keeps the
/// models from seeing a hard black border next to faces cut by the frame.
///
/// When the crop shrinks the photo by more than 2x the single bilinear tap aliases; the caller
/// passes a pre-shrunk image (`prescaled`, with its scale factor) in that case.
pub fn warp(img: &RgbImage, photo_to_crop: &Affine, width: u32, height: u32) -> Vec<u8> {
    let inv = photo_to_crop.inverse().unwrap_or(Affine::IDENTITY);
    let (w, h) = img.dimensions();
    let mut out = vec![0u8; (width * height * 3) as usize];
    if w == 0 || h == 0 {
        return out;
    }
    let raw = img.as_raw();
    let max_x = (w - 1) as f32;
    let max_y = (h - 1) as f32;
    let stride = w as usize * 3;
    for oy in 0..height {
        for ox in 0..width {
            // Sample at pixel centres.
            let (sx, sy) = inv.apply(ox as f32 + 0.5, oy as f32 + 0.5);
            let sx = (sx - 0.5).clamp(0.0, max_x);
            let sy = (sy - 0.5).clamp(0.0, max_y);
            let x0 = sx.floor() as usize;
            let y0 = sy.floor() as usize;
            let x1 = (x0 + 1).min(w as usize - 1);
            let y1 = (y0 + 1).min(h as usize - 1);
            let fx = sx - x0 as f32;
            let fy = sy - y0 as f32;
            let o = ((oy * width + ox) * 3) as usize;
            for ch in 0..3 {
                let p00 = raw[y0 * stride + x0 * 3 + ch] as f32;
                let p01 = raw[y0 * stride + x1 * 3 + ch] as f32;
                let p10 = raw[y1 * stride + x0 * 3 + ch] as f32;
                let p11 = raw[y1 * stride + x1 * 3 + ch] as f32;
                let top = p00 + (p01 - p00) * fx;
                let bottom = p10 + (p11 - p10) * fx;
                out[o + ch] = (top + (bottom - top) * fy).round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    out
}

/// Renders a crop, first shrinking the photo with a proper low-pass filter when the transform
/// would otherwise skip pixels.
pub fn warp_antialiased(img: &RgbImage, photo_to_crop: &Affine, width: u32, height: u32) -> Vec<u8> {
    let s = photo_to_crop.scale();
    if s >= 0.5 || s <= 0.0 {
        return warp(img, photo_to_crop, width, height);
    }
    // Shrink only the region the crop covers, so a small face in a big photo stays cheap.
    let Some(inv) = photo_to_crop.inverse() else { return warp(img, photo_to_crop, width, height) };
    let corners = [(0.0, 0.0), (width as f32, 0.0), (0.0, height as f32), (width as f32, height as f32)]
        .map(|(x, y)| inv.apply(x, y));
    let (iw, ih) = img.dimensions();
    let x0 = corners.iter().map(|p| p.0).fold(f32::MAX, f32::min).floor().max(0.0) as u32;
    let y0 = corners.iter().map(|p| p.1).fold(f32::MAX, f32::min).floor().max(0.0) as u32;
    let x1 = (corners.iter().map(|p| p.0).fold(f32::MIN, f32::max).ceil() as i64).clamp(0, iw as i64) as u32;
    let y1 = (corners.iter().map(|p| p.1).fold(f32::MIN, f32::max).ceil() as i64).clamp(0, ih as i64) as u32;
    if x1 <= x0 + 1 || y1 <= y0 + 1 {
        return warp(img, photo_to_crop, width, height);
    }
    let factor = (2.0 * s).min(1.0);
    let (rw, rh) = (((x1 - x0) as f32 * factor).round().max(1.0) as u32, ((y1 - y0) as f32 * factor).round().max(1.0) as u32);
    let small = resize_region(img, [x0 as f64, y0 as f64, (x1 - x0) as f64, (y1 - y0) as f64], rw, rh);
    let sx = rw as f32 / (x1 - x0) as f32;
    let sy = rh as f32 / (y1 - y0) as f32;
    // photo -> small: ((x - x0) * sx, (y - y0) * sy); compose so small -> crop.
    let to_photo = Affine { a: 1.0 / sx, b: 0.0, c: x0 as f32, d: 0.0, e: 1.0 / sy, f: y0 as f32 };
    warp(&small, &compose(photo_to_crop, &to_photo), width, height)
}

/// The `[left, top, width, height]` region of `img` (photo pixels, fractional allowed) resampled
/// to `width` x `height` with a bilinear filter widened to the scale, so shrinking averages every
/// pixel a target pixel covers instead of aliasing. SIMD (fast_image_resize); on a 2 MP photo
/// about ten times faster than `image`'s triangle filter.
pub fn resize_region(img: &RgbImage, region: [f64; 4], width: u32, height: u32) -> RgbImage {
    use fast_image_resize::{images::ImageRef, FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
    let (w, h) = img.dimensions();
    let mut out = RgbImage::new(width.max(1), height.max(1));
    let Ok(src) = ImageRef::new(w, h, img.as_raw(), PixelType::U8x3) else { return out };
    let (ow, oh) = out.dimensions();
    let Ok(mut dst) = fast_image_resize::images::Image::from_slice_u8(ow, oh, &mut out, PixelType::U8x3) else { return RgbImage::new(ow, oh) };
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear)).crop(region[0], region[1], region[2], region[3]);
    // Sizes and the crop are consistent by construction; a failure would leave the output black.
    let _ = Resizer::new().resize(&src, &mut dst, &options);
    out
}

/// `outer ∘ inner`: apply `inner` first.
pub fn compose(outer: &Affine, inner: &Affine) -> Affine {
    Affine {
        a: outer.a * inner.a + outer.b * inner.d,
        b: outer.a * inner.b + outer.b * inner.e,
        c: outer.a * inner.c + outer.b * inner.f + outer.c,
        d: outer.d * inner.a + outer.e * inner.d,
        e: outer.d * inner.b + outer.e * inner.e,
        f: outer.d * inner.c + outer.e * inner.f + outer.f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;

    fn close(a: f32, b: f32, tol: f32) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn recovers_a_known_similarity() {
        let angle = 0.3f32;
        let (s, tx, ty) = (1.7f32, 12.0f32, -4.0f32);
        let truth = Affine { a: s * angle.cos(), b: -s * angle.sin(), c: tx, d: s * angle.sin(), e: s * angle.cos(), f: ty };
        let src = [(10.0, 20.0), (50.0, 22.0), (30.0, 40.0), (31.0, 60.0)];
        let dst: Vec<_> = src.iter().map(|&(x, y)| truth.apply(x, y)).collect();
        let fit = similarity_transform(&src, &dst).unwrap();
        for (p, q) in [(fit.a, truth.a), (fit.b, truth.b), (fit.c, truth.c), (fit.d, truth.d), (fit.e, truth.e), (fit.f, truth.f)] {
            assert!(close(p, q, 1e-3), "{fit:?} vs {truth:?}");
        }
        assert!(close(fit.scale(), s, 1e-4));
    }

    #[test]
    fn least_squares_on_noisy_points_is_reasonable() {
        // Level eyes 40 px apart mapped onto a template 20 px apart: scale 0.5, no rotation.
        let src = [(100.0, 100.0), (140.0, 100.0), (120.0, 125.0)];
        let dst = [(10.0, 10.0), (30.0, 10.0), (20.0, 22.0)];
        let fit = similarity_transform(&src, &dst).unwrap();
        assert!(close(fit.scale(), 0.5, 0.02));
        assert!(fit.b.abs() < 0.02, "no rotation expected: {fit:?}");
    }

    #[test]
    fn degenerate_inputs_are_refused() {
        assert!(similarity_transform(&[(1.0, 1.0)], &[(0.0, 0.0)]).is_none());
        assert!(similarity_transform(&[(1.0, 1.0), (1.0, 1.0)], &[(0.0, 0.0), (1.0, 0.0)]).is_none());
        assert!(similarity_transform(&[(1.0, 1.0), (2.0, 1.0)], &[(0.0, 0.0)]).is_none());
    }

    #[test]
    fn inverse_and_compose_round_trip() {
        let t = Affine { a: 0.8, b: -0.6, c: 5.0, d: 0.6, e: 0.8, f: -3.0 };
        let inv = t.inverse().unwrap();
        let id = compose(&inv, &t);
        let (x, y) = id.apply(13.0, -7.0);
        assert!(close(x, 13.0, 1e-4) && close(y, -7.0, 1e-4));
    }

    #[test]
    fn square_crop_maps_box_corners() {
        let t = square_crop_transform(50.0, 40.0, 20.0, 100);
        let (x, y) = t.apply(40.0, 30.0);
        assert!(close(x, 0.0, 1e-4) && close(y, 0.0, 1e-4));
        let (x, y) = t.apply(60.0, 50.0);
        assert!(close(x, 100.0, 1e-4) && close(y, 100.0, 1e-4));
    }

    #[test]
    fn warp_identity_copies_and_rotation_moves_pixels() {
        let img = RgbImage::from_fn(8, 8, |x, y| Rgb([(x * 30) as u8, (y * 30) as u8, 7]));
        let same = warp(&img, &Affine::IDENTITY, 8, 8);
        assert_eq!(same, img.as_raw().clone());
        // 90° rotation about the image centre: photo (x, y) lands at crop (8 - y, x).
        let rot = Affine { a: 0.0, b: -1.0, c: 8.0, d: 1.0, e: 0.0, f: 0.0 };
        let out = warp(&img, &rot, 8, 8);
        let at = |x: usize, y: usize| &out[(y * 8 + x) * 3..(y * 8 + x) * 3 + 3];
        // crop pixel (7, 2) came from photo (2, 0)
        assert_eq!(at(7, 2), &[60, 0, 7]);
    }

    #[test]
    fn antialiased_warp_averages_fine_stripes() {
        // 1-px black/white stripes shrunk 8x: plain bilinear hits single stripes, the
        // antialiased path returns grey.
        let img = RgbImage::from_fn(256, 256, |x, _| if x % 2 == 0 { Rgb([0, 0, 0]) } else { Rgb([255, 255, 255]) });
        let t = square_crop_transform(128.0, 128.0, 256.0, 32);
        let out = warp_antialiased(&img, &t, 32, 32);
        let mean = out.iter().map(|&v| v as f32).sum::<f32>() / out.len() as f32;
        assert!((mean - 127.5).abs() < 20.0, "mean {mean}");
        let spread = out.iter().map(|&v| (v as f32 - mean).abs()).fold(0.0, f32::max);
        assert!(spread < 60.0, "stripes survived: {spread}");
    }
}
