// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

interface IEIP3009Transfer {
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

/// @dev Test only. In one transaction: a payer's EIP-3009 transfer to someone else, then a
///      plain transferFrom of the same payer into `to`, as a router or a batching wallet
///      might do. The second transfer is not an x402 payment, whatever came before it.
contract AuthorizationThenTransfer {
    function run(
        address token,
        address from,
        address elsewhere,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes calldata signature,
        address to,
        uint256 amount
    ) external {
        IEIP3009Transfer(token).transferWithAuthorization(from, elsewhere, value, validAfter, validBefore, nonce, signature);
        require(IERC20(token).transferFrom(from, to, amount), "transferFrom failed");
    }
}
