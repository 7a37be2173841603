"""Type stubs of kiln.layers (written by python/gen_stubs.py from the catalogue)."""
from typing import Any, Callable, Optional, Sequence, Union

from . import Model, Tensor

def linear(n_in: int, n_out: int, bias: bool = True, init: str = 'he') -> Model:
    """x @ W + b: [..., n_in] -> [..., n_out]"""

def dense(n_in: int, n_out: int, act: Optional[Union[str, Callable[[Tensor], Tensor]]] = None) -> Model:
    """linear followed by an activation"""

def bilinear(n1: int, n2: int, n_out: int) -> Model:
    """[a[B,n1], b[B,n2]] -> [B,n_out]: a^T W_k b + b_k"""

def embedding(vocab: int, d: int) -> Model:
    """integer ids [B,T] -> [B,T,d]"""

def positional_encoding(max_len: int, d: int, learned: bool = False) -> Model:
    """[B,T,d] plus sinusoidal or learned positions"""

def conv2d_layer(c_in: int, c_out: int, k: int = 3, stride: int = 1, padding: Any = 'same') -> Model:
    """2-D cross-correlation [B,C,H,W]"""

def max_pool(k: int = 2) -> Model:
    """k x k max pooling, stride k"""

def avg_pool(k: int = 2) -> Model:
    """k x k average pooling, stride k"""

def global_avg_pool() -> Model:
    """[B,C,H,W] -> [B,C]"""

def flatten_layer() -> Model:
    """[B,...] -> [B, everything else]"""

def reshape_layer(*dims: int) -> Model:
    """[B,...] -> [B, d1, d2, ...]"""

def lstm_layer(n_in: int, hidden: int, return_sequences: bool = True) -> Model:
    """LSTM over [B,T,n_in] (a scan)"""

def gru_layer(n_in: int, hidden: int, return_sequences: bool = True) -> Model:
    """GRU over [B,T,n_in] (a scan)"""

def last_step() -> Model:
    """[B,T,D] -> [B,D]"""

def mean_pool(axis: int = 1) -> Model:
    """mean over an axis"""

def multi_head_attention(d: int, heads: int = 4, causal: bool = False) -> Model:
    """self- or cross-attention"""

def transformer_block(d: int, heads: int = 4, ff: Optional[int] = None, causal: bool = False, dropout: float = 0.0, activation: Union[str, Callable[[Tensor], Tensor]] = 'gelu') -> Model:
    """pre-norm transformer block"""

def transformer_encoder(d: int, heads: int = 4, layers: int = 2, ff: Optional[int] = None, causal: bool = False, dropout: float = 0.0) -> Model:
    """blocks then a final layer norm"""

def layer_norm_layer(d: int, eps: float = 1e-05) -> Model:
    """normalises the last axis"""

def rms_norm_layer(d: int, eps: float = 1e-06) -> Model:
    """x / rms(x) * gamma"""

def batch_norm_layer(d: int, eps: float = 1e-05) -> Model:
    """batch statistics, channel axis 1"""

def dropout_layer(p: float = 0.1) -> Model:
    """inverted dropout, only with train=true"""

def scale(d: int, shift: bool = True) -> Model:
    """x * s + t per feature"""

def activation(fn: Union[str, Callable[[Tensor], Tensor]]) -> Model:
    """an activation by name or function"""

def identity() -> Model:
    """returns its input"""

def select(i: int) -> Model:
    """element i of a list input"""

def lambda_layer(fn: Callable[..., Tensor], name: str = 'lambda') -> Model:
    """a function as a layer without parameters"""

def add() -> Model:
    """sum of a list of inputs"""

def multiply() -> Model:
    """product of a list of inputs"""

def concatenate(axis: int = -1) -> Model:
    """concatenation of a list of inputs"""

def sequential(layers: Sequence[Union[Model, str, Callable[[Tensor], Tensor]]]) -> Model:
    """applies the layers in order"""

def residual(inner: Union[Model, str, Callable[[Tensor], Tensor]], pre_norm: Optional[Union[Model, str, Callable[[Tensor], Tensor]]] = None) -> Model:
    """x + inner(norm(x))"""

def parallel(branches: Sequence[Union[Model, str, Callable[[Tensor], Tensor]]], combine: str = 'concat') -> Model:
    """every branch on the same input, combined"""

def dag(nodes: Sequence[Any], inputs: Union[str, Sequence[str]] = ['x'], output: Optional[Any] = None) -> Model:
    """any directed acyclic graph of layers"""

def siamese(encoder: Union[Model, str, Callable[[Tensor], Tensor]], combine: str = 'concat', head: Optional[Union[Model, str, Callable[[Tensor], Tensor]]] = None) -> Model:
    """one encoder with shared weights on [a, b]"""

def gcn(n_in: int, n_out: int, bias: bool = True) -> Model:
    """graph convolution (Kipf & Welling)"""

def sage(n_in: int, n_out: int, aggregate: str = 'mean') -> Model:
    """GraphSAGE with mean, sum or max"""

def gat(n_in: int, n_out: int, heads: int = 4, concat: bool = True, slope: float = 0.2) -> Model:
    """graph attention"""

def gin(n_in: int, n_out: int, hidden: Optional[int] = None) -> Model:
    """graph isomorphism network layer"""

def graph_pool(how: str = 'mean') -> Model:
    """[N,D] -> [graphs,D] using the graph's batch"""

def mlp(sizes: Sequence[int], act: Union[str, Callable[[Tensor], Tensor]] = 'relu', dropout: float = 0.0, norm: bool = False, out_act: Optional[Union[str, Callable[[Tensor], Tensor]]] = None) -> Model:
    """multi-layer perceptron"""

def resnet_mlp(d_in: int, d_out: int, width: int = 64, blocks: int = 3, act: Union[str, Callable[[Tensor], Tensor]] = 'gelu') -> Model:
    """MLP with pre-norm residual blocks"""

def cnn(in_channels: int, classes: int, image: int = 28, channels: Sequence[int] = [16, 32], dense_width: int = 64) -> Model:
    """convolutional classifier"""

def lstm_classifier(n_in: int, hidden: int, classes: int, layers: int = 1) -> Model:
    """LSTM classifier"""

def transformer_lm(vocab: int, d: int = 64, heads: int = 4, layers: int = 2, context: int = 128, dropout: float = 0.0) -> Model:
    """GPT-style language model"""

def transformer_classifier(vocab: int, classes: int, d: int = 64, heads: int = 4, layers: int = 2, context: int = 128) -> Model:
    """transformer sequence classifier"""

def autoencoder(d_in: int, latent: int, hidden: Sequence[int] = [64], act: Union[str, Callable[[Tensor], Tensor]] = 'relu') -> Model:
    """returns [reconstruction, code]"""

def vae(d_in: int, latent: int, hidden: Sequence[int] = [64], act: Union[str, Callable[[Tensor], Tensor]] = 'relu') -> Model:
    """returns [reconstruction, mu, logvar]"""

def gcn_net(n_in: int, hidden: int, classes: int, layers: int = 2, dropout: float = 0.5) -> Model:
    """GCN node classifier"""

def gat_net(n_in: int, hidden: int, classes: int, heads: int = 4, dropout: float = 0.3) -> Model:
    """GAT node classifier"""

def gin_net(n_in: int, hidden: int, classes: int, layers: int = 3, pool: str = 'sum') -> Model:
    """GIN graph classifier"""
