// SPDX-License-Identifier: Apache-2.0
package io.cortado.jni;

/**
 * What a training session reports while {@link NativeTrainer#train} or {@link
 * NativeTrainer#step} runs, on the thread that called it. An exception thrown here stops
 * training and is rethrown by that call.
 */
public interface TrainerListener {

  /**
   * A display iteration (every {@code display} iterations, and the closing one): the smoothed
   * loss, the learning rate, and the {@code iterations} trained in {@code seconds} since the
   * previous display. For Caffe's closing display (one more forward pass after the last update,
   * when {@code display} divides max_iter) {@code iterations} is 0 and {@code seconds} is
   * negative.
   */
  void onIteration(int iter, float loss, float learningRate, int iterations, double seconds);

  /**
   * A test pass at iteration {@code iter}: the means of the test outputs, named as in {@link
   * NativeTrainer#testOutputNames}.
   */
  void onTest(int iter, String[] names, float[] values);

  /**
   * A snapshot at iteration {@code iter}: .caffemodel and .solverstate bytes, the state naming
   * the model {@code <file name of the snapshot prefix>_iter_<iter>.caffemodel}. The listener
   * stores them (model first, state last).
   */
  void onSnapshot(int iter, byte[] model, byte[] state);
}
