"""Each zero-cost proxy on a small case worked out by hand."""

import math

import pytest
import torch
from torch import nn

from aihpc.recommend import proxies as P


def _linear(weight, bias=False):
    layer = nn.Linear(len(weight[0]), len(weight), bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float32))
    return layer


def test_grad_norm_and_snip_of_one_linear_layer():
    # logits = W x = [1, 3] for x = [1, 0]; p = softmax = [s(-2), s(2)];
    # dL/dlogits = p - onehot(0) = [-s(2), s(2)]; dL/dW = outer(that, x) = [[-s2, 0], [s2, 0]].
    model = _linear([[1.0, 2.0], [3.0, 4.0]])
    x, y = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    s2 = 1 / (1 + math.exp(-2))
    assert P.grad_norm(model, x, y) == pytest.approx(math.sqrt(2) * s2, rel=1e-6)
    assert P.snip(model, x, y) == pytest.approx(s2 * 1 + s2 * 3, rel=1e-6)


def test_synflow_of_two_linear_layers_is_twice_the_path_sum():
    # |W1| = [[1, 2], [3, .5]], |W2| = [[1, 2]], input ones: R = 1*(1+2) + 2*(3+.5) = 10.
    # dR/dW1_ji = |W2_j|, dR/dW2_j = sum_i |W1_ji|: each layer's sum |g w| is R -> 2R = 20.
    model = nn.Sequential(_linear([[1.0, -2.0], [3.0, 0.5]]), _linear([[-1.0, 2.0]]))
    assert P.synflow(model, torch.zeros(5, 2)) == pytest.approx(20.0)


def test_jacob_cov_of_a_relu_sum():
    # f(x) = sum(relu(x)): J rows are the masks [1,0,1] and [0,1,1], correlation -1/2,
    # eigenvalues 1/2 and 3/2; score = -(log(.5+k) + 1/(.5+k) + log(1.5+k) + 1/(1.5+k)).
    x = torch.tensor([[1.0, -1.0, 2.0], [-1.0, 1.0, 3.0]])
    k = 1e-5
    want = -(math.log(0.5 + k) + 1 / (0.5 + k) + math.log(1.5 + k) + 1 / (1.5 + k))
    assert P.jacob_cov(nn.Sequential(nn.ReLU()), x) == pytest.approx(want, rel=1e-9)


def test_naswot_of_three_codes():
    # codes [1,0,1], [0,1,1], [1,1,1]; K = 3 - Hamming = [[3,1,2],[1,3,2],[2,2,3]], det 8.
    x = torch.tensor([[1.0, -1.0, 2.0], [-1.0, 1.0, 3.0], [1.0, 2.0, 3.0]])
    assert P.naswot(nn.Sequential(nn.ReLU()), x) == pytest.approx(math.log(8.0), rel=1e-9)
    assert math.isnan(P.naswot(nn.Sequential(nn.Tanh()), x))


def test_proxies_leave_the_model_untouched_and_are_repeatable():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(8, 1, 5, 5), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    first = P.score_all(model, x, y)
    assert P.score_all(model, x, y) == first
    assert set(first) == {"snip", "grad_norm", "synflow", "jacob_cov", "naswot"}
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
