(** Finite sums over the first [n] naturals, and the inequalities the certificate's proofs use:
    linearity, monotonicity, the triangle inequality, Cauchy–Schwarz, the weighted harmonic–arithmetic
    inequality, and sums split into two interleaved or two consecutive halves. *)

From Coq Require Import Reals Lra Lia Psatz.
Open Scope R_scope.

Fixpoint sumn (n : nat) (f : nat -> R) : R :=
  match n with
  | O => 0
  | S k => sumn k f + f k
  end.

Lemma sumn_ext n f g : (forall i, (i < n)%nat -> f i = g i) -> sumn n f = sumn n g.
Proof.
  induction n as [|n IH]; intros H; simpl; [reflexivity|].
  rewrite IH by (intros; apply H; lia). rewrite (H n) by lia. reflexivity.
Qed.

Lemma sumn_plus n f g : sumn n (fun i => f i + g i) = sumn n f + sumn n g.
Proof. induction n; simpl; [lra | rewrite IHn; lra]. Qed.

Lemma sumn_minus n f g : sumn n (fun i => f i - g i) = sumn n f - sumn n g.
Proof. induction n; simpl; [lra | rewrite IHn; lra]. Qed.

Lemma sumn_scal n c f : sumn n (fun i => c * f i) = c * sumn n f.
Proof. induction n; simpl; [lra | rewrite IHn; lra]. Qed.

Lemma sumn_const n c : sumn n (fun _ => c) = INR n * c.
Proof. induction n; simpl sumn; [simpl; lra | rewrite IHn, S_INR; lra]. Qed.

Lemma sumn_le n f g : (forall i, (i < n)%nat -> f i <= g i) -> sumn n f <= sumn n g.
Proof.
  induction n as [|n IH]; intros H; simpl; [lra|].
  assert (sumn n f <= sumn n g) by (apply IH; intros; apply H; lia).
  assert (f n <= g n) by (apply H; lia). lra.
Qed.

Lemma sumn_nonneg n f : (forall i, (i < n)%nat -> 0 <= f i) -> 0 <= sumn n f.
Proof.
  induction n as [|n IH]; intros H; simpl; [lra|].
  assert (0 <= sumn n f) by (apply IH; intros; apply H; lia).
  assert (0 <= f n) by (apply H; lia). lra.
Qed.

Lemma sumn_pos n f : (0 < n)%nat -> (forall i, (i < n)%nat -> 0 < f i) -> 0 < sumn n f.
Proof.
  destruct n as [|n]; [lia|]. intros _ H. simpl.
  assert (0 <= sumn n f) by (apply sumn_nonneg; intros; apply Rlt_le, H; lia).
  assert (0 < f n) by (apply H; lia). lra.
Qed.

Lemma sumn_abs n f : Rabs (sumn n f) <= sumn n (fun i => Rabs (f i)).
Proof.
  induction n; simpl; [rewrite Rabs_R0; lra|].
  eapply Rle_trans; [apply Rabs_triang|]. lra.
Qed.

(** Splitting a sum of [2m] terms into its even and odd terms (interleaved pairs), or into its two
    halves (pairs [(k, k + m)]). *)
Lemma sumn_pairs_interleaved m f : sumn (2 * m) f = sumn m (fun k => f (2 * k)%nat + f (2 * k + 1)%nat).
Proof.
  induction m as [|m IH]; [reflexivity|].
  replace (2 * S m)%nat with (S (S (2 * m))) by lia. cbn [sumn]. rewrite IH.
  replace (S (2 * m)) with (2 * m + 1)%nat by lia. lra.
Qed.

Lemma sumn_add n m f : sumn (n + m) f = sumn n f + sumn m (fun k => f (n + k)%nat).
Proof.
  induction m as [|m IH]; simpl; [rewrite Nat.add_0_r; lra|].
  rewrite Nat.add_succ_r. simpl. rewrite IH. lra.
Qed.

Lemma sumn_pairs_halves m f : sumn (2 * m) f = sumn m (fun k => f k + f (m + k)%nat).
Proof.
  replace (2 * m)%nat with (m + m)%nat by lia. rewrite sumn_add, sumn_plus. reflexivity.
Qed.

(** Exchanging the order of a double sum. *)
Lemma sumn_swap n m (f : nat -> nat -> R) :
  sumn n (fun i => sumn m (fun j => f i j)) = sumn m (fun j => sumn n (fun i => f i j)).
Proof.
  induction n as [|n IH]; simpl.
  - induction m; simpl; [reflexivity | rewrite <- IHm; lra].
  - rewrite IH, <- sumn_plus. reflexivity.
Qed.

(** Cauchy–Schwarz, squared: [(Σ a b)² ≤ (Σ a²)(Σ b²)]. *)
Lemma sumn_cauchy_schwarz_sq n a b :
  (sumn n (fun i => a i * b i)) ^ 2 <= sumn n (fun i => a i ^ 2) * sumn n (fun i => b i ^ 2).
Proof.
  induction n as [|n IH]; cbn [sumn]; [lra|].
  set (sab := sumn n (fun i => a i * b i)) in *.
  set (saa := sumn n (fun i => a i ^ 2)) in *.
  set (sbb := sumn n (fun i => b i ^ 2)) in *.
  assert (Haa : 0 <= saa) by (apply sumn_nonneg; intros; apply pow2_ge_0).
  assert (Hbb : 0 <= sbb) by (apply sumn_nonneg; intros; apply pow2_ge_0).
  set (x := a n) in *. set (y := b n) in *.
  (* 2·sab·x·y ≤ saa·y² + sbb·x², from (saa·y² + sbb·x²)² ≥ 4·saa·sbb·x²y² ≥ 4·sab²·x²y² *)
  assert (Hm : 2 * sab * (x * y) <= saa * y ^ 2 + sbb * x ^ 2).
  { assert (H0 : 0 <= saa * y ^ 2 + sbb * x ^ 2) by nra.
    assert (H1 : (2 * sab * (x * y)) ^ 2 <= (saa * y ^ 2 + sbb * x ^ 2) ^ 2).
    { assert (4 * saa * sbb * (x * y) ^ 2 <= (saa * y ^ 2 + sbb * x ^ 2) ^ 2)
        by (assert (0 <= (saa * y ^ 2 - sbb * x ^ 2) ^ 2) by apply pow2_ge_0; nra).
      assert (sab ^ 2 * (x * y) ^ 2 <= saa * sbb * (x * y) ^ 2)
        by (apply Rmult_le_compat_r; [apply pow2_ge_0 | lra]).
      nra. }
    destruct (Rle_dec (2 * sab * (x * y)) 0); [lra|].
    apply Rsqr_incr_0_var; [unfold Rsqr; nra | exact H0]. }
  replace ((sab + x * y) ^ 2) with (sab ^ 2 + 2 * sab * (x * y) + x ^ 2 * y ^ 2) by ring.
  replace ((saa + x ^ 2) * (sbb + y ^ 2)) with (saa * sbb + (saa * y ^ 2 + sbb * x ^ 2) + x ^ 2 * y ^ 2) by ring.
  lra.
Qed.

Lemma sumn_cauchy_schwarz n a b :
  Rabs (sumn n (fun i => a i * b i)) <= sqrt (sumn n (fun i => a i ^ 2)) * sqrt (sumn n (fun i => b i ^ 2)).
Proof.
  rewrite <- sqrt_mult_alt by (apply sumn_nonneg; intros; apply pow2_ge_0).
  rewrite <- sqrt_Rsqr_abs. apply sqrt_le_1_alt. unfold Rsqr.
  replace (sumn n (fun i => a i * b i) * sumn n (fun i => a i * b i))
    with ((sumn n (fun i => a i * b i)) ^ 2) by ring.
  apply sumn_cauchy_schwarz_sq.
Qed.

(** The weighted harmonic–arithmetic inequality: for weights [w ≥ 0] and [x > 0],
    [(Σ w x)(Σ w / x) ≥ (Σ w)²]. *)
Lemma sumn_harmonic n w x :
  (forall i, (i < n)%nat -> 0 <= w i /\ 0 < x i) ->
  (sumn n w) ^ 2 <= sumn n (fun i => w i * x i) * sumn n (fun i => w i / x i).
Proof.
  induction n as [|n IH]; intros H; cbn [sumn]; [lra|].
  assert (IH' := IH (fun i Hi => H i ltac:(lia))).
  destruct (H n ltac:(lia)) as [Hw Hx].
  set (W := sumn n w) in *. set (S1 := sumn n (fun i => w i * x i)) in *.
  set (S2 := sumn n (fun i => w i / x i)) in *.
  assert (HW : 0 <= W) by (apply sumn_nonneg; intros; apply H; lia).
  assert (H1 : 0 <= S1) by (apply sumn_nonneg; intros i Hi; destruct (H i ltac:(lia)); nra).
  assert (H2 : 0 <= S2).
  { apply sumn_nonneg; intros i Hi; destruct (H i ltac:(lia)).
    unfold Rdiv; apply Rmult_le_pos; [lra | apply Rlt_le, Rinv_0_lt_compat; lra]. }
  set (a := x n * S2). set (b := S1 / x n).
  assert (Ha : 0 <= a) by (unfold a; nra).
  assert (Hb : 0 <= b) by (unfold b, Rdiv; apply Rmult_le_pos; [lra | apply Rlt_le, Rinv_0_lt_compat; lra]).
  assert (Hab : a * b = S1 * S2) by (unfold a, b; field; lra).
  (* a + b ≥ 2W: (a + b)² ≥ 4ab = 4·S1·S2 ≥ 4W² *)
  assert (Hsum : 2 * W <= a + b).
  { assert (4 * W ^ 2 <= (a + b) ^ 2) by (assert (0 <= (a - b) ^ 2) by apply pow2_ge_0; nra).
    destruct (Rle_dec (2 * W) (a + b)); [assumption|]. nra. }
  replace ((S1 + w n * x n) * (S2 + w n / x n)) with (S1 * S2 + w n * (a + b) + w n ^ 2)
    by (unfold a, b; field; lra).
  nra.
Qed.

Lemma Rabs_le_inv' x y : Rabs x <= y -> - y <= x <= y.
Proof. intros H. unfold Rabs in H. destruct (Rcase_abs x); lra. Qed.
