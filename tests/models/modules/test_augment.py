"""In-model augmentations (BioFormer Appendix B.1): what each parsed operator does to a tensor."""

from __future__ import annotations

import torch

from biosig_lightning.models.modules.augment import augment, augment_each, parse_augmentation


def test_scale_draws_one_factor_per_sample_and_sequence_and_jitter_adds_noise_of_that_sd() -> None:
    torch.manual_seed(0)
    assert parse_augmentation("scale0.2") == ("scale", 0.2) and parse_augmentation("drop") == ("dropout", 0.1)
    e = torch.ones(4, 3, 50)
    out = augment(e, "scale", 0.2)
    factors = out[..., 0]
    torch.testing.assert_close(out, factors[..., None].expand_as(out))  # constant along the last axis
    assert (factors.std(dim=1) > 0).all()  # and not shared by the sequences of one sample
    noise = augment(torch.zeros(2000, 1, 50), "jitter", 0.5)
    assert abs(noise.std().item() - 0.5) < 0.01
    assert augment(e, "identity", 0.0) is e


def test_augment_each_gives_every_copy_one_drawn_operator_with_its_own_draws() -> None:
    torch.manual_seed(0)
    e = torch.ones(4, 3, 50)
    seen = set()
    for _ in range(20):
        copies = augment_each(e, 3, [("identity", 0.0), ("scale", 0.2)])
        assert copies.shape == (3, 4, 3, 50)
        for copy in copies:
            if torch.equal(copy, e):
                seen.add("identity")
            else:  # scaled: one factor per (sample, channel), constant along time, drawn for this copy alone
                torch.testing.assert_close(copy, copy[..., :1].expand_as(copy))
                assert (copy[..., 0] != 1).all()
                seen.add("scale")
        scaled = [c for c in copies if not torch.equal(c, e)]
        assert all(not torch.equal(a, b) for i, a in enumerate(scaled) for b in scaled[i + 1:])
    assert seen == {"identity", "scale"}
