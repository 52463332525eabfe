"""The benchmark workloads: each builds its state on a device from a fixed seed, runs one step,
and names the outputs that are checked against the CPU before anything is timed.

Every step's result is consumed (issue 13). A lazy mode computes only what is still needed at its
sync point, so a step whose result is overwritten before the sync is dead work it may skip (a
timed repetition of `inner` steps would then time one step). Each step therefore either feeds
its result forward (the next step reads it: the chain ends in live state) or folds it into an
accumulator kept in the state, and `observe(state)` names a tensor that depends on every step so
far; run_workload.py reads one element of it at the end of every repetition, which is that
repetition's sync point. The consumption is part of the step in every mode, stock included, so
ratios stay fair, and each workload says which it uses and why it is cheap against the step."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Workload:
    """name: report key; inner: steps per timed repetition (tiny steps are timed in batches);
    bytes_per_step: the least memory traffic one step needs (for GB/s), or None."""
    inner = 1
    bytes_per_step = None
    tolerance = 1e-4

    def build(self, device):
        raise NotImplementedError

    def step(self, state):
        """Runs one step on `state`, consumes its result (see the module's docstring) and
        returns the outputs checked against the CPU."""
        raise NotImplementedError

    def observe(self, state):
        """A tensor in `state` every element of which depends on every step run so far."""
        raise NotImplementedError


def seeded():
    torch.manual_seed(0)


def tanh_gelu(x):
    """GELU (tanh form) written as the nine primitive ops a user would write: three multiplies
    for 0.044715 x^3, an add, a multiply, tanh, an add, two multiplies."""
    return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


class TanhGelu(Workload):
    """GELU (tanh form) written as the primitive ops a user would write (nine ops), its result
    added in place into an accumulator: one more elementwise op. GELU's own output cannot be fed
    forward: iterated, it halves small values and drives them into denormals, then zeros."""
    def __init__(self, elements, label):
        self.name = f"gelu-tanh-{label}"
        self.elements = elements
        self.bytes_per_step = 12 * elements  # read x, read and write the accumulator
        self.inner = max(1, (1 << 20) // elements)

    def build(self, device):
        seeded()
        x = torch.randn(self.elements)
        return {"x": x.to(device), "sum": torch.zeros_like(x).to(device)}

    def step(self, state):
        y = tanh_gelu(state["x"])
        state["sum"].add_(y)
        return y

    def observe(self, state):
        return state["sum"]


class BinaryAdd(Workload):
    """16M-element float32 add into a reused output: the bandwidth-bound op of issue 3. Fed
    forward at no extra cost: two buffers take turns as input and output (x + y into out, then
    out + y into x), so each add reads the previous one's result; the values grow by y a step."""
    name = "add-16M"
    elements = 16 << 20
    bytes_per_step = 12 * elements

    def build(self, device):
        seeded()
        x = torch.randn(self.elements)
        return {"x": x.to(device), "y": (x * 0.5).to(device), "out": torch.empty(self.elements).to(device)}

    def step(self, state):
        result = torch.add(state["x"], state["y"], out=state["out"])
        state["x"], state["out"] = state["out"], state["x"]
        return result

    def observe(self, state):
        return state["x"]


class TinyAdd(Workload):
    """An 8-element add: the per-op cost of dispatch (issue 3: at most 1.2x stock). Fed forward at
    no extra cost (x = x + y); the values grow by y a step."""
    name = "tiny-add-8"
    inner = 2000

    def build(self, device):
        seeded()
        return {"x": torch.randn(8).to(device), "y": torch.randn(8).to(device)}

    def step(self, state):
        state["x"] = state["x"] + state["y"]
        return state["x"]

    def observe(self, state):
        return state["x"]


class LayerNormResidual(Workload):
    """Fed forward at no extra cost: the normalized output is the next step's input (layer norm
    keeps its range). Other shapes are for tests; the report's is (32, 128, 768)."""
    name = "layernorm-residual"

    def __init__(self, shape=(32, 128, 768)):
        self.shape = shape
        self.bytes_per_step = 3 * 4 * torch.Size(shape).numel()

    def build(self, device):
        seeded()
        width = self.shape[-1]
        return {"x": torch.randn(self.shape).to(device), "r": torch.randn(self.shape).to(device),
                "w": torch.randn(width).to(device), "b": torch.randn(width).to(device)}

    def step(self, s):
        s["x"] = F.layer_norm(s["x"] + s["r"], (self.shape[-1],), s["w"], s["b"])
        return s["x"]

    def observe(self, s):
        return s["x"]


class Softmax(Workload):
    """Fed forward at no extra cost: the probabilities are the next step's input (any
    accumulation would cost as much as the softmax itself). The rows tend to uniform, 1/128, a
    normal float; the kernels' cost does not depend on the values. Other shapes are for tests;
    the report's is (8, 12, 128, 128)."""
    name = "softmax"

    def __init__(self, shape=(8, 12, 128, 128)):
        self.shape = shape
        self.bytes_per_step = 2 * 4 * torch.Size(shape).numel()

    def build(self, device):
        seeded()
        return {"x": torch.randn(self.shape).to(device)}

    def step(self, s):
        s["x"] = torch.softmax(s["x"], dim=-1)
        return s["x"]

    def observe(self, s):
        return s["x"]


def gpt_parameter_shapes(layers=12, width=768):
    shapes = []
    for _ in range(layers):
        shapes += [(3 * width, width), (3 * width,), (width, width), (width,),
                   (4 * width, width), (4 * width,), (width, 4 * width), (width,),
                   (width,), (width,), (width,), (width,)]
    return shapes


class AdamWStep(Workload):
    """torch.optim.AdamW (foreach off) over a 12-layer, 768-wide GPT's parameters."""
    name = "adamw-gpt12"
    tolerance = 1e-5
    foreach = False

    def __init__(self):
        numel = sum(torch.Size(s).numel() for s in gpt_parameter_shapes())
        self.bytes_per_step = 28 * numel  # read p, g, m, v; write p, m, v

    def build(self, device):
        seeded()
        params = [torch.randn(s).mul_(0.02).to(device).requires_grad_() for s in gpt_parameter_shapes()]
        for p in params:
            p.grad = torch.randn(p.shape).mul_(0.01).to(device)
        return {"params": params,
                "opt": torch.optim.AdamW(params, lr=1e-3, foreach=self.foreach)}

    def step(self, s):
        # Consumed at no extra cost: each step updates the parameters and moments in place and
        # the next reads them.
        s["opt"].step()
        return s["params"][0], s["params"][-1]

    def observe(self, s):
        return s["params"][-1]


class AdamWForeachStep(AdamWStep):
    """The same AdamW step with foreach=True: the _foreach_* ops over the parameter lists."""
    name = "adamw-gpt12-foreach"
    foreach = True


def training_step(s, model):
    """Forward, backward, optimizer step. The updated parameters feed the next step; the loss,
    which backward does not read, is added into a running sum (one scalar add per step)."""
    loss = s[model](*s["inputs"]).pow(2).mean()
    loss.backward()
    s["opt"].step()
    s["opt"].zero_grad()
    s["loss_sum"].add_(loss.detach())
    return loss.detach()


class MlpTrainStep(Workload):
    name = "mlp-train"
    tolerance = 1e-3

    def build(self, device):
        seeded()
        model = nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024)).to(device)
        return {"model": model, "inputs": (torch.randn(64, 1024).to(device),),
                "opt": torch.optim.SGD(model.parameters(), lr=1e-3),
                "loss_sum": torch.zeros(()).to(device)}

    def step(self, s):
        return training_step(s, "model")

    def observe(self, s):
        return s["loss_sum"]


class TinyRegressionTrain(Workload):
    """A small regression model's training step: Linear 8 -> 16, ReLU, Linear 16 -> 1 on a batch of
    32, mse_loss, SGD (lr 0.01), zero_grad each step. Every op is tiny, so what it measures is each
    op's cost and each backward pass's start (issue 15: "a small regression script runs 1.6x
    slower"). The parameters feed the next step; the loss is added into a running sum, which a
    repetition reads. Timed in batches of steps."""
    name = "tiny-regression-train"
    inner = 50

    def build(self, device):
        seeded()
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to(device)
        return {"model": model, "x": torch.randn(32, 8).to(device),
                "y": torch.randn(32, 1).to(device),
                "opt": torch.optim.SGD(model.parameters(), lr=0.01),
                "loss_sum": torch.zeros(()).to(device)}

    def step(self, s):
        s["opt"].zero_grad()
        loss = F.mse_loss(s["model"](s["x"]), s["y"])
        loss.backward()
        s["opt"].step()
        s["loss_sum"].add_(loss.detach())
        return loss.detach()

    def observe(self, s):
        return s["loss_sum"]


class Block(nn.Module):
    """A GPT-2 style block (pre-norm, causal self-attention, GELU MLP) with explicit attention and
    separate query, key and value projections: PyTorch 1.13's lazy tensor backend aborts on
    nn.MultiheadAttention and on views split from one fused projection."""
    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def attention(self, x, mask):
        b, t, d = x.shape
        q, k, v = (layer(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for layer in (self.q, self.k, self.v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5) + mask
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x, mask):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class TransformerTrainStep(Workload):
    """A GPT-style block, forward, backward and AdamW (d=256, 4 heads, T=128, B=8)."""
    name = "transformer-block-train"
    tolerance = 1e-3

    def build(self, device):
        seeded()
        block = Block().to(device)
        mask = torch.full((128, 128), float("-inf"), device=device).triu(1)
        return {"block": block, "inputs": (torch.randn(8, 128, 256).to(device), mask),
                "opt": torch.optim.AdamW(block.parameters(), lr=1e-4, foreach=False),
                "loss_sum": torch.zeros(()).to(device)}

    def step(self, s):
        return training_step(s, "block")

    def observe(self, s):
        return s["loss_sum"]


def seeded_step(s):
    """Seeds the step's random ops (dropout) from its index, so the checked first step draws the
    same numbers on the CPU and on the device (the device's random ops use the CPU generator)
    whatever ran before it; a seed costs microseconds against these steps."""
    torch.manual_seed(1000 + s["steps"])
    s["steps"] += 1


def classification_step(s, loss_fn=F.cross_entropy):
    """Forward, loss against the labels, backward, optimizer step; the loss is added into a
    running sum (one scalar add), and the updated parameters feed the next step."""
    seeded_step(s)
    loss = loss_fn(s["model"](s["x"]), s["labels"])
    loss.backward()
    s["opt"].step()
    s["opt"].zero_grad()
    s["loss_sum"].add_(loss.detach())
    return loss.detach()


def classification_state(model, x, labels, opt, device):
    return {"model": model, "x": x.to(device), "labels": labels.to(device), "opt": opt,
            "loss_sum": torch.zeros(()).to(device), "steps": 0}


class ClassificationTrain(Workload):
    """A classifier's training step on one fixed batch (classification_step); a subclass builds
    its state (classification_state) and may change the loss. A repetition reads the loss sum."""
    tolerance = 1e-3
    loss_fn = staticmethod(F.cross_entropy)

    def step(self, s):
        return classification_step(s, self.loss_fn)

    def observe(self, s):
        return s["loss_sum"]


class ResNet18Train(ClassificationTrain):
    """torchvision's resnet18 (1000 classes) training: batch 16 of 112 x 112 images, batch norm
    in training mode, cross-entropy, SGD with momentum and weight decay."""
    name = "resnet18-train"

    def build(self, device):
        import torchvision
        seeded()
        model = torchvision.models.resnet18(weights=None).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
        return classification_state(model, torch.randn(16, 3, 112, 112),
                                    torch.randint(0, 1000, (16,)), opt, device)


class MobileNetV2Train(ClassificationTrain):
    """torchvision's mobilenet_v2 (1000 classes) training: batch 16 of 112 x 112 images
    (depthwise convolutions, batch norm, ReLU6, dropout), cross-entropy, SGD with momentum."""
    name = "mobilenet-v2-train"

    def build(self, device):
        import torchvision
        seeded()
        model = torchvision.models.mobilenet_v2(weights=None).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return classification_state(model, torch.randn(16, 3, 112, 112),
                                    torch.randint(0, 1000, (16,)), opt, device)


class MnistNet(nn.Module):
    """The classic MNIST network of pytorch/examples: two convolutions, max-pool, dropout, two
    linear layers, log-softmax."""
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)
        self.dropout1, self.dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        x = F.relu(self.fc1(torch.flatten(self.dropout1(x), 1)))
        return F.log_softmax(self.fc2(self.dropout2(x)), dim=1)


class CnnMnistTrain(ClassificationTrain):
    """MnistNet training on a batch of 64 28 x 28 images: nll_loss, Adadelta (lr 1.0)."""
    name = "cnn-mnist-train"
    loss_fn = staticmethod(F.nll_loss)

    def build(self, device):
        seeded()
        model = MnistNet().to(device)
        return classification_state(model, torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,)),
                                    torch.optim.Adadelta(model.parameters(), lr=1.0), device)


class LstmLanguageModel(nn.Module):
    def __init__(self, vocab, width, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.lstm = nn.LSTM(width, width, layers)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens, state):
        out, state = self.lstm(self.embed(tokens), state)
        return self.head(out), state


class LstmLmTrain(Workload):
    """A 2-layer LSTM language model (pytorch/examples' word_language_model, without dropout):
    vocabulary 2,000, width 256, 35 steps of a batch of 16, cross-entropy, gradient clipping at
    0.25, SGD. The final state, detached, is the next step's initial state (truncated
    backpropagation through time): the steps feed forward, and the loss is summed as well."""
    name = "lstm-lm-train"
    tolerance = 1e-3
    vocab = 2000

    def build(self, device):
        seeded()
        model = LstmLanguageModel(self.vocab, 256, 2).to(device)
        state = (torch.zeros(2, 16, 256).to(device), torch.zeros(2, 16, 256).to(device))
        tokens = torch.randint(0, self.vocab, (36, 16))
        return {"model": model, "tokens": tokens[:-1].to(device), "targets": tokens[1:].to(device),
                "state": state, "opt": torch.optim.SGD(model.parameters(), lr=1.0),
                "loss_sum": torch.zeros(()).to(device)}

    def step(self, s):
        logits, state = s["model"](s["tokens"], s["state"])
        s["state"] = tuple(h.detach() for h in state)
        loss = F.cross_entropy(logits.view(-1, self.vocab), s["targets"].reshape(-1))
        loss.backward()
        nn.utils.clip_grad_norm_(s["model"].parameters(), 0.25)
        s["opt"].step()
        s["opt"].zero_grad()
        s["loss_sum"].add_(loss.detach())
        return loss.detach()

    def observe(self, s):
        return s["loss_sum"]


class GptMini(nn.Module):
    """Six of the Block above with a token embedding, learned positions, a final layer norm and a
    language-model head."""
    def __init__(self, vocab=2048, width=256, layers=6, context=128):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.randn(context, width) * 0.02)
        self.blocks = nn.ModuleList(Block(width) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, tokens, mask):
        x = self.tokens(tokens) + self.positions[:tokens.shape[1]]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


class GptMiniTrain(Workload):
    """GptMini training (vocabulary 2,048, width 256, 6 layers, batch 4 of 128 tokens):
    next-token cross-entropy, AdamW (foreach off, 1.13's default)."""
    name = "gpt-mini-train"
    tolerance = 1e-3
    vocab = 2048

    def build(self, device):
        seeded()
        model = GptMini(self.vocab).to(device)
        tokens = torch.randint(0, self.vocab, (4, 129))
        mask = torch.full((128, 128), float("-inf")).triu(1)
        return {"model": model, "tokens": tokens[:, :-1].to(device),
                "targets": tokens[:, 1:].to(device), "mask": mask.to(device),
                "opt": torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False),
                "loss_sum": torch.zeros(()).to(device)}

    def step(self, s):
        logits = s["model"](s["tokens"], s["mask"])
        loss = F.cross_entropy(logits.reshape(-1, self.vocab), s["targets"].reshape(-1))
        loss.backward()
        s["opt"].step()
        s["opt"].zero_grad()
        s["loss_sum"].add_(loss.detach())
        return loss.detach()

    def observe(self, s):
        return s["loss_sum"]


class ResNet18Inference(Workload):
    """The logits (8 x 1000) are added in place into an accumulator: 8,000 elements against
    1.8 GFLOP a batch."""
    name = "resnet18-infer"
    tolerance = 1e-3

    def build(self, device):
        import torchvision
        seeded()
        model = torchvision.models.resnet18(weights=None).eval().to(device)
        return {"model": model, "x": torch.randn(8, 3, 224, 224).to(device),
                "sum": torch.zeros(8, 1000).to(device)}

    def step(self, s):
        with torch.no_grad():
            logits = s["model"](s["x"])
            s["sum"].add_(logits)
        return logits

    def observe(self, s):
        return s["sum"]


class GeluMlpInference(Workload):
    """A no-grad MLP: `layers` Linear layers of width x width with tanh_gelu (nine primitive ops)
    between them, on a batch of 64: matmuls as library steps with elementwise chains between
    them. The output (batch x width) is added in place into an accumulator: one elementwise op
    against the layers' 3 x 134 MFLOP. Other sizes are for tests."""
    name = "inference-gelu-mlp"
    tolerance = 1e-3

    def __init__(self, layers=3, batch=64, width=1024):
        self.layers, self.batch, self.width = layers, batch, width

    def build(self, device):
        seeded()
        model = nn.Sequential(*(nn.Linear(self.width, self.width) for _ in range(self.layers)))
        return {"model": model.eval().to(device), "x": torch.randn(self.batch, self.width).to(device),
                "sum": torch.zeros(self.batch, self.width).to(device)}

    def step(self, s):
        with torch.no_grad():
            layers = list(s["model"])
            h = s["x"]
            for layer in layers[:-1]:
                h = tanh_gelu(layer(h))
            out = layers[-1](h)
            s["sum"].add_(out)
        return out

    def observe(self, s):
        return s["sum"]


class VariableLengthLoop(Workload):
    """Each step uses the next of 20 sequence lengths: shape-polymorphic kernels mean a new
    length compiles nothing. The lengths differ, so no step can feed the next: each result
    (4 x length) is summed into a running scalar, two small ops against a (4 x length x 256) @
    (256 x 256) matmul and a GELU chain on its 4 x length x 256 result."""
    name = "varlen-loop"
    lengths = list(range(16, 336, 16))
    inner = 20
    tolerance = 1e-4

    def build(self, device):
        seeded()
        return {"w": torch.randn(256, 256).mul_(0.05).to(device), "b": torch.randn(256).to(device),
                "xs": [torch.randn(4, t, 256).to(device) for t in self.lengths], "i": 0,
                "sum": torch.zeros(()).to(device)}

    def step(self, s):
        x = s["xs"][s["i"] % len(s["xs"])]
        s["i"] += 1
        h = x @ s["w"]
        y = (tanh_gelu(h) + s["b"]).sum(-1)
        s["sum"].add_(y.sum())
        return y

    def observe(self, s):
        return s["sum"]


def all_workloads(quick=False):
    if quick:
        return [TinyAdd(), BinaryAdd(), TanhGelu(1 << 20, "1M"), Softmax(), MlpTrainStep(),
                VariableLengthLoop()]
    return [TinyAdd(), BinaryAdd(), TanhGelu(1 << 10, "1K"), TanhGelu(1 << 16, "64K"),
            TanhGelu(1 << 20, "1M"), TanhGelu(1 << 24, "16M"), LayerNormResidual(), Softmax(),
            AdamWStep(), AdamWForeachStep(), MlpTrainStep(), TransformerTrainStep(),
            ResNet18Inference(), GeluMlpInference(), VariableLengthLoop(), ResNet18Train(),
            MobileNetV2Train(), CnnMnistTrain(), LstmLmTrain(), GptMiniTrain(),
            TinyRegressionTrain()]


def by_name(name):
    for w in all_workloads():
        if w.name == name:
            return w
    raise KeyError(f"no workload named {name!r}; known: {[w.name for w in all_workloads()]}")
