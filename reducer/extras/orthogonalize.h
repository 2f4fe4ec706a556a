// Orthonormal columns for PowerSGD's low-rank factors, as PyTorch's powerSGD_hook._orthogonalize.
//
// `matrix` is an n x r row-major float32 or float64 tensor with r <= n, changed in place:
//  * r <= 2: Gram-Schmidt — each column in turn is divided by its norm (plus `epsilon`, which
//    keeps an all-zero column at zero instead of NaN), then projected out of the columns after it;
//  * r > 2: the Q of a Householder QR from LAPACK (sgeqrf/sorgqr, dgeqrf/dorgqr, in OpenBLAS) —
//    what torch.linalg.qr returns, with its signs: column j of Q points against the j-th pivot,
//    so R's diagonal has the opposite sign of the pivot. `epsilon` plays no part there, as in
//    PyTorch.
// Nothing is allocated once a thread has seen its largest matrix (LAPACK's workspace is kept per
// thread).
#pragma once

#include "autograd/tensor.h"

namespace ddpkit::reducer {

void Orthogonalize(const Tensor& matrix, double epsilon = 0);

// The two methods, for tests.
void GramSchmidt(const Tensor& matrix, double epsilon = 0);
void HouseholderQ(const Tensor& matrix);

}  // namespace ddpkit::reducer
