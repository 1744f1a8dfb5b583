"""AMINO: the Fourier layer against a direct DFT computation, shapes and the pair average."""

import numpy as np
import pytest
import torch

from lwl.models.amino import AMINO, AMINORegressor, SpectralConv2d, relative_l1

SMALL = dict(channels=(4, 8, 8, 8, 8, 8, 8, 8), trunk_layers=2, trunk_width=16, latent=8, fno_channels=4, fno_modes=3)


def test_spectral_convolution_matches_a_direct_dft():
    torch.manual_seed(0)
    H = W = 12
    layer = SpectralConv2d(channels=3, modes=4).double()
    layer.w1.data = layer.w1.data.to(torch.cdouble)
    layer.w2.data = layer.w2.data.to(torch.cdouble)
    v = torch.randn(2, 3, H, W, dtype=torch.float64)
    got = layer(v).detach().numpy()
    x = np.arange(H)
    E_h = np.exp(-2j * np.pi * np.outer(x, x) / H)  # forward DFT matrices, written out
    E_w = np.exp(-2j * np.pi * np.outer(x, x) / W)
    vh = np.einsum("bcxy,kx,ly->bckl", v.numpy(), E_h, E_w)
    w1, w2 = layer.w1.detach().numpy(), layer.w2.detach().numpy()
    yh = np.zeros((2, 3, H, W), dtype=complex)
    yh[:, :, :4, :4] = np.einsum("bikl,iokl->bokl", vh[:, :, :4, :4], w1)
    yh[:, :, -4:, :4] = np.einsum("bikl,iokl->bokl", vh[:, :, -4:, :4], w2)
    # real inverse of a half spectrum with no Nyquist column: columns k2 >= 1 count twice
    weight = np.where(np.arange(W) == 0, 1.0, 2.0)
    want = np.real(np.einsum("bokl,l,xk,yl->boxy", yh, weight, E_h.conj(), E_w.conj())) / (H * W)
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_amino_maps_pairs_to_a_field_and_averages_over_pairs():
    torch.manual_seed(0)
    M, L = 9, 5
    net = AMINO(M, **SMALL)
    f, g = torch.randn(3, L, 4 * M - 4), torch.randn(3, L, 4 * M - 4)
    out = net(f, g)
    assert out.shape == (3, M, M)
    perm = torch.randperm(L)
    torch.testing.assert_close(net(f[:, perm], g[:, perm]), out)  # a set of pairs: order does not matter
    torch.testing.assert_close(net(f.repeat(1, 2, 1), g.repeat(1, 2, 1)), out)  # an average, not a sum


@pytest.mark.slow
def test_paper_sizes_build_at_the_paper_grid():
    net = AMINO(70)  # the paper's channels, trunk 8 x 512, p = 100, FNO 128 channels x 32 modes
    assert net.spectral.modes == 32 and net.lift.out_channels == 128
    assert net.branch_out.out_features == 100 and len([m for m in net.trunk if isinstance(m, torch.nn.Linear)]) == 9
    out = net(torch.randn(1, 2, 276), torch.randn(1, 2, 276))
    assert out.shape == (1, 70, 70)


@pytest.mark.slow
def test_regressor_learns_a_map_from_pairs_and_is_seeded():
    rng = np.random.default_rng(0)
    M, L, n = 9, 3, 48
    s = rng.uniform(0.5, 2.0, n)
    f = rng.standard_normal((n, L, 4 * M - 4))
    g = f * s[:, None, None]  # the "conductivity" scales the response
    a = np.broadcast_to(s[:, None, None], (n, M, M)).copy()
    fit = lambda: AMINORegressor(M, **SMALL, epochs=60, batch_size=8, learning_rate=3e-3, seed=1).fit(f, g, a)  # noqa: E731
    m = fit()
    assert m.loss_history_[-1] < 0.5 * m.loss_history_[0]
    np.testing.assert_array_equal(m.predict(f, g), fit().predict(f, g))
    err = m.errors(f, g, a)
    np.testing.assert_allclose(err, np.abs(m.predict(f, g) - a).sum((1, 2)) / a.sum((1, 2)), rtol=1e-6)
    assert relative_l1(torch.ones(1, 2, 2), torch.ones(1, 2, 2)).item() == 0.0


def _pairs_data(M=9, L=3, n=24, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.5, 2.0, n)
    f = rng.standard_normal((n, L, 4 * M - 4))
    return f, f * s[:, None, None], np.broadcast_to(s[:, None, None], (n, M, M)).copy()


def test_checkpoint_resumes_to_the_uninterrupted_weights(tmp_path):
    """Two epochs, a stop, then a fit of four epochs on the same checkpoint: the weights and the
    loss history equal those of four epochs without a stop; a finished checkpoint skips training;
    another seed (another model) starts afresh; a checkpoint with more epochs is refused."""
    f, g, a = _pairs_data()
    kw = dict(**SMALL, batch_size=8, learning_rate=3e-3, seed=1, device="cpu")
    straight = AMINORegressor(9, epochs=4, **kw).fit(f, g, a)
    ckpt = tmp_path / "model.pt"
    first = AMINORegressor(9, epochs=2, checkpoint=ckpt, **kw).fit(f, g, a)
    assert first.resumed_epochs_ == 0 and ckpt.is_file()
    resumed = AMINORegressor(9, epochs=4, checkpoint=ckpt, **kw).fit(f, g, a)
    assert resumed.resumed_epochs_ == 2
    assert resumed.loss_history_ == straight.loss_history_
    for (name, x), (_, y) in zip(straight.net_.state_dict().items(), resumed.net_.state_dict().items()):
        assert torch.equal(x, y), name
    again = AMINORegressor(9, epochs=4, checkpoint=ckpt, **kw).fit(f, g, a)
    assert again.resumed_epochs_ == 4 and again.loss_history_ == straight.loss_history_
    other = AMINORegressor(9, epochs=1, checkpoint=ckpt, **{**kw, "seed": 2}).fit(f, g, a)
    assert other.resumed_epochs_ == 0
    AMINORegressor(9, epochs=3, checkpoint=ckpt, **kw).fit(f, g, a)  # seed 1 again: 3 epochs written
    with pytest.raises(ValueError, match="checkpoint"):
        AMINORegressor(9, epochs=2, checkpoint=ckpt, **kw).fit(f, g, a)


def test_precision_is_checked_and_tf32_changes_nothing_on_a_cpu():
    from lwl.models.precision import matmul_precision

    with pytest.raises(ValueError, match="precision"):
        AMINORegressor(9, **SMALL, precision="bf16")
    f, g, a = _pairs_data(n=8)
    kw = dict(**SMALL, epochs=1, batch_size=8, seed=0, device="cpu")
    p32 = AMINORegressor(9, **kw).fit(f, g, a).predict(f, g)
    ptf = AMINORegressor(9, **kw, precision="tf32").fit(f, g, a).predict(f, g)
    np.testing.assert_array_equal(p32, ptf)
    if torch.cuda.is_available():  # the switches are set inside and restored after
        before = torch.backends.cuda.matmul.allow_tf32
        with matmul_precision("tf32", torch.device("cuda")):
            assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.backends.cuda.matmul.allow_tf32 == before
