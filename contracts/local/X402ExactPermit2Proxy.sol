// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {ISignatureTransfer} from "@uniswap/v4-periphery/lib/permit2/src/interfaces/ISignatureTransfer.sol";

/// @title x402ExactPermit2Proxy (local stand-in)
/// @notice A LOCAL STAND-IN for the canonical x402ExactPermit2Proxy, which the x402 project
///         deploys with CREATE2 at 0x402085c248EeA27D92E8b30b2C58ed07f9E20001 on real chains.
///         Written here from the x402 spec (specs/schemes/exact/scheme_exact_evm.md,
///         "AssetTransferMethod: Permit2") and from the ABI the x402 EVM package calls
///         (`x402ExactPermit2ProxyABI` in the npm package x402/evm, under the x402 scope),
///         not from the x402 project's source. It is never
///         deployed to a real chain: stack/local-deploy.ts places its runtime code at the
///         canonical address on the local Hardhat chains (hardhat_setCode), next to Uniswap's
///         Permit2, so x402 `exact` payments with `assetTransferMethod: "permit2"` settle there
///         as they do on Celo and Base.
/// @dev    The payer approves Permit2 and signs a PermitWitnessTransferFrom naming this
///         contract as spender, with the witness {to, validAfter}. Anyone (the facilitator)
///         may submit it: Permit2 checks the signature, deadline and nonce, and the witness
///         binds the destination, so the submitter can change neither amount nor payee.
///         The whole permitted amount always moves ("exact").
///         It has no constructor and no immutables (PERMIT2 is a constant), so its runtime
///         code works wherever it is placed. The spec's reference and the x402 project's
///         published contract (x402BasePermit2Proxy) differ on settleWithPermit: the latter
///         wants the EIP-2612 value equal to the amount and goes on, logging why, when the
///         token's permit fails. This follows the spec; the service never calls it. On
///         settle they agree, and so does the order of logs the ledger reads: the token's
///         Transfer, then Settled().
contract x402ExactPermit2Proxy is ReentrancyGuardTransient {
    /// @notice Uniswap's Permit2, at its canonical address (the same on every EVM chain).
    ISignatureTransfer public constant PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    /// @notice The witness part of the signed type, as Permit2 appends it to
    ///         "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,".
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)";

    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,uint256 validAfter)");

    /// @notice What the payer binds into its signature besides the permit: the payee, and the
    ///         earliest time the payment may settle.
    struct Witness {
        address to;
        uint256 validAfter;
    }

    /// @notice An EIP-2612 permit of the token to Permit2, for payers that have not approved it.
    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    /// @notice A payment settled through `settle`. It follows the token's Transfer log.
    event Settled();
    /// @notice A payment settled through `settleWithPermit`. It follows the token's Transfer log.
    event SettledWithPermit();

    error InvalidAmount();
    error InvalidDestination();
    error InvalidOwner();
    error InvalidPermit2Address();
    error PaymentTooEarly();
    error Permit2612AmountMismatch();

    /// @notice Moves `permit.permitted.amount` of `permit.permitted.token` from `owner` to
    ///         `witness.to`, as `owner` signed it. The owner has approved Permit2.
    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _settle(permit, owner, witness, signature);
        emit Settled();
    }

    /// @notice As `settle`, first approving Permit2 for `owner` with its EIP-2612 permit. As
    ///         the spec's reference implementation does, a permit that fails reverts the whole
    ///         settlement (the spec is silent on a permit someone submitted first).
    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        if (permit2612.value < permit.permitted.amount) revert Permit2612AmountMismatch();
        IERC20Permit(permit.permitted.token).permit(
            owner, address(PERMIT2), permit2612.value, permit2612.deadline, permit2612.v, permit2612.r, permit2612.s
        );
        _settle(permit, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        if (permit.permitted.amount == 0) revert InvalidAmount();
        if (owner == address(0)) revert InvalidOwner();
        if (witness.to == address(0)) revert InvalidDestination();
        if (block.timestamp < witness.validAfter) revert PaymentTooEarly();
        if (address(PERMIT2).code.length == 0) revert InvalidPermit2Address();

        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.validAfter));
        PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: permit.permitted.amount}),
            owner,
            witnessHash,
            WITNESS_TYPE_STRING,
            signature
        );
    }
}
