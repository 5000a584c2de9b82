"""examples/gpt: the GPT and its training step on jgrad equal the same files run on PyTorch (their import
lines pointed at torch), with the same weights and batches; train.py runs end to end; a PyTorch checkpoint
of the GPT loads into the jgrad GPT and gives the same loss."""
import io
import os
import sys

import numpy as np
import pytest
import torch

import jgrad as jg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
import twin  # noqa: E402

CONFIG = dict(block_size=16, n_layer=1, n_head=2, n_embd=32, dropout=0.0)  # train.py's run below: same shapes
VOCAB = 59  # the characters of coriolanus.txt


@pytest.fixture(scope="module")
def twins():
    jt, tt = twin.load_train("jgrad"), twin.load_train("torch")
    jm, tm = twin.load_model("jgrad"), twin.load_model("torch")
    assert tt.torch is torch and jt.torch is jg and tm.F is torch.nn.functional and jm.F is jg.nn.functional
    return jt, tt, jm, tm


@pytest.mark.cpu_only("compares with the same model on PyTorch's CPU")
def test_gpt_training_steps_equal_pytorch(twins):
    jt, tt, jm, tm = twins
    tok, train_data, _ = jt.load_data(os.path.join(ROOT, "examples", "gpt", "coriolanus.txt"))
    assert tok.vocab_size == VOCAB
    torch.manual_seed(0)
    tmodel = tm.GPT(tm.GPTConfig(vocab_size=tok.vocab_size, **CONFIG))
    jmodel = jm.GPT(jm.GPTConfig(vocab_size=tok.vocab_size, **CONFIG))
    assert [n for n, _ in jmodel.named_parameters()] == [n for n, _ in tmodel.named_parameters()]
    assert jmodel.transformer.wte.weight is jmodel.lm_head.weight      # tied, as in torch

    # a PyTorch checkpoint of the model, loaded with jg.load, gives the same loss
    buf = io.BytesIO()
    torch.save({"model": tmodel.state_dict()}, buf)
    buf.seek(0)
    res = jmodel.load_state_dict(jg.load(buf)["model"])
    assert not res.missing_keys and not res.unexpected_keys
    rng_j, rng_t = np.random.default_rng(0), np.random.default_rng(0)
    x, y = jt.get_batch(train_data, CONFIG["block_size"], 4, rng_j, jg.device("cpu"))
    _, jloss = jmodel(x, y)
    _, tloss = tmodel(*tt.get_batch(train_data, CONFIG["block_size"], 4, rng_t, "cpu"))
    np.testing.assert_allclose(jloss.item(), tloss.item(), rtol=1e-6)

    # four float32 steps of AdamW with warmup + cosine schedule and gradient clipping, in each framework's own code
    jopt = jmodel.configure_optimizers(0.1, 3e-3, (0.9, 0.95))
    topt = tmodel.configure_optimizers(0.1, 3e-3, (0.9, 0.95))
    jsched, tsched = jt.make_scheduler(jopt, 2, 4), tt.make_scheduler(topt, 2, 4)
    for step in range(4):
        jb = jt.get_batch(train_data, CONFIG["block_size"], 4, rng_j, jg.device("cpu"))
        tb = tt.get_batch(train_data, CONFIG["block_size"], 4, rng_t, "cpu")
        jl = jt.train_step(jmodel, jopt, jsched, *jb, grad_clip=0.5)
        tl = tt.train_step(tmodel, topt, tsched, *tb, grad_clip=0.5)
        np.testing.assert_allclose(jl.item(), tl.item(), rtol=1e-6, err_msg=f"step {step}")
        assert jsched.get_last_lr() == tsched.get_last_lr()
    for (n, p), (_, q) in zip(jmodel.named_parameters(), tmodel.named_parameters()):
        # float32: the key bias's gradient is zero up to round-off (softmax ignores a constant per row), and
        # Adam's update normalises that noise, so those entries differ by up to ~1e-6 (all else by ~1e-8)
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=n)


def test_generate_samples_valid_tokens_with_fixed_shapes(twins):
    _, _, jm, _ = twins
    jg.manual_seed(0)
    model = jm.GPT(jm.GPTConfig(vocab_size=VOCAB, **CONFIG)).eval()
    prompt = jg.tensor([[3, 4, 5]])
    out = model.generate(prompt, 20, temperature=0.9, top_k=3, generator=jg.Generator().manual_seed(1))
    assert out.shape == (1, 23) and out[:, :3].tolist() == [[3, 4, 5]]
    again = model.generate(prompt, 20, temperature=0.9, top_k=3, generator=jg.Generator().manual_seed(1))
    assert again.tolist() == out.tolist()                                 # the generator decides the sample
    assert 0 <= out.min().item() and out.max().item() < VOCAB


def test_train_script_end_to_end(twins, tmp_path, capsys):
    jt = twins[0]
    argv = ["--steps", "4", "--n-layer", "1", "--n-head", "2", "--n-embd", "32", "--block-size", "16",
            "--batch-size", "4", "--eval-interval", "2", "--eval-iters", "1", "--sample-tokens", "12", "--warmup", "2",
            "--log-interval", "2", "--out", str(tmp_path), "--no-progress", "--mode", jg.get_execution_mode()]
    with jg.execution_mode(jg.get_execution_mode()):
        result = jt.main(argv)
    assert len(result["losses"]) == 4 and all(np.isfinite(result["losses"]))
    assert [e[0] for e in result["evals"]] == [2, 4]
    assert len(result["sample"]) == 13 and set(result["sample"]) <= set(result["tokenizer"].chars)
    assert (tmp_path / "loss.png").stat().st_size > 1000
    ck = jg.load(tmp_path / "ckpt.pt")
    assert ck["steps"] == 4 and ck["config"]["n_layer"] == 1 and ck["vocab"] == result["tokenizer"].chars
    model = twins[2].GPT(twins[2].GPTConfig(**ck["config"]))
    assert not model.load_state_dict(ck["model"]).missing_keys
    printed = capsys.readouterr().out
    assert "4 steps in" in printed and "---- sample ----" in printed
